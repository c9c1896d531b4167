"""What the API server's validation would refuse in a claim, a claim template or a DeviceClass: its selectors.

Called by ``dra-gpu explain`` for the objects of its files (``-f``, ``--classes``): objects that
are not in a cluster yet, which the API server would validate as new objects before anything is
scheduled. A CEL selector is refused as ``validateCELExpression`` of
``k8s.io/kubernetes/pkg/apis/resource/validation`` refuses it (1.34-1.37 alike): longer than
10 KiB, not compiling in the release's environment for new expressions, or with an estimated
cost over 1,000,000 (``dra_driver.schedsim.cel.validate_selector``). Objects read from a cluster
were validated when they were stored and are not checked again, as the API server does not.

Each refusal names the object, the request (and subrequest) or the class, the selector, and
carries the API server's own message: ``ResourceClaim.resource.k8s.io "x" is invalid:
spec.devices.requests[0].exactly.selectors[0].cel.expression: Forbidden: too complex, exceeds
cost limit``. Objects of the wrong shape are passed over here; the readers of ``objects.py``
report them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dra_driver.schedsim.allocator.validate import show
from dra_driver.schedsim.cel import validate_selector
from dra_driver.schedsim.rules import NEWEST, Rules

_SPEC_PATH = {"ResourceClaim": "spec", "ResourceClaimTemplate": "spec.spec", "DeviceClass": "spec"}


@dataclass(frozen=True, slots=True)
class Refusal:
    """One selector the API server would refuse: where it is and the API server's field error."""

    kind: str
    namespace: str
    name: str
    where: str  # request "x" / request "x", subrequest "y" / class
    index: int  # the selector's position (0-based)
    expression: str
    field: str  # the field path, as the API server prints it
    problem: str  # the field error after the path

    def api_message(self) -> str:
        """The API server's words: ``Kind.resource.k8s.io "name" is invalid: field: problem``."""
        return f'{self.kind}.resource.k8s.io "{self.name}" is invalid: {self.field}: {self.problem}'

    def __str__(self) -> str:
        who = f"{self.kind} {self.namespace + '/' if self.namespace else ''}{show(self.name)}"
        return (
            f"{who}, {self.where}, selector #{self.index + 1} ({show(self.expression, 60)}): "
            f"the API server would refuse it: {self.api_message()}"
        )


def _seq(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _obj(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, Mapping) else {}


def _selectors(selectors: Any, path: str) -> Iterator[tuple[int, str, str]]:
    """(index, field path, expression) of each CEL selector in a list of selectors."""
    for i, sel in enumerate(_seq(selectors)):
        expression = _obj(_obj(sel).get("cel")).get("expression")
        if isinstance(expression, str):
            yield i, f"{path}[{i}].cel.expression", expression


def _claim_selectors(spec: Mapping[str, Any], path: str) -> Iterator[tuple[str, int, str, str]]:
    """(request label, index, field path, expression) of every selector of a claim's spec."""
    for r, item in enumerate(_seq(_obj(spec.get("devices")).get("requests"))):
        req = _obj(item)
        name = req.get("name")
        label = f'request "{show(name)}"' if isinstance(name, str) else f"request #{r + 1}"
        rp = f"{path}.devices.requests[{r}]"
        if "exactly" in req:
            for i, field, expression in _selectors(_obj(req.get("exactly")).get("selectors"), f"{rp}.exactly.selectors"):
                yield label, i, field, expression
        for s, sub_item in enumerate(_seq(req.get("firstAvailable"))):
            sub = _obj(sub_item)
            sub_name = sub.get("name")
            sub_label = (
                f'{label}, subrequest "{show(sub_name)}"' if isinstance(sub_name, str) else f"{label}, subrequest #{s + 1}"
            )
            for i, field, expression in _selectors(sub.get("selectors"), f"{rp}.firstAvailable[{s}].selectors"):
                yield sub_label, i, field, expression
        # A v1beta1 request's selectors: validated in the internal (v1) shape, so named as exactly's.
        for i, field, expression in _selectors(req.get("selectors"), f"{rp}.exactly.selectors"):
            yield label, i, field, expression


def refusals(obj: Mapping[str, Any], rules: Rules = NEWEST) -> list[Refusal]:
    """The selectors of one ResourceClaim, ResourceClaimTemplate or DeviceClass the API server would refuse."""
    kind = obj.get("kind")
    if kind not in _SPEC_PATH:
        return []
    meta = _obj(obj.get("metadata"))
    name = meta.get("name") if isinstance(meta.get("name"), str) else ""
    namespace = meta.get("namespace") if isinstance(meta.get("namespace"), str) else ""
    spec = _obj(obj.get("spec"))
    found: Iterator[tuple[str, int, str, str]]
    if kind == "DeviceClass":
        found = (("class", i, field, expr) for i, field, expr in _selectors(spec.get("selectors"), "spec.selectors"))
    elif kind == "ResourceClaimTemplate":
        found = _claim_selectors(_obj(spec.get("spec")), _SPEC_PATH[kind])
    else:
        found = _claim_selectors(spec, _SPEC_PATH[kind])
    out = []
    for where, index, field, expression in found:
        for problem in validate_selector(expression, rules):
            out.append(Refusal(str(kind), str(namespace), str(name), where, index, expression, field, problem))
    return out


def all_refusals(objs: Sequence[Any], rules: Rules = NEWEST) -> list[Refusal]:
    """:func:`refusals` of every claim, template and class among ``objs`` (anything else is passed over)."""
    return [r for o in objs if isinstance(o, Mapping) for r in refusals(o, rules)]


__all__ = ["Refusal", "all_refusals", "refusals"]
