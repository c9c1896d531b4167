"""The selector-outcome cache: whether a request's selectors accept a device, computed once per device shape.

Mixed into the allocator (``simulate.py``: :class:`~dra_driver.schedsim.allocator.simulate.NodeAllocator`,
whose ``isSelectable`` asks :meth:`SelectorOutcomeCache.selector_outcome`) and used by candidate
explanations (``candidates.py``: :meth:`~SelectorOutcomeCache.outcomes_by_view`). Go's allocator
evaluates the class's then the request's selectors per device (``selectorsMatch`` in
k8s.io/dynamic-resource-allocation structured/allocator) and caches nothing across nodes; this
cache gives the same answer keyed by what selectors can see (see ``shapes.py``): the device's
view (driver, attributes, capacity, ``allowMultipleAllocations``), or what the selectors read of
it (:meth:`~SelectorOutcomeCache._projection`), or the outcome of the device whose attributes the
reader derived these from (:meth:`~SelectorOutcomeCache._names_read`). An outcome never names the
device: the allocator words messages that do.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dra_driver.schedsim.allocator.model import DeviceID, Request
from dra_driver.schedsim.allocator.shapes import NOT_STORED, SelectorOutcome, ShapeCache, ViewKey
from dra_driver.schedsim.cel import CelCompileError, CelError, CompiledSelector, DeviceView, compile_selector
from dra_driver.schedsim.rules import NEWEST, Rules

__all__ = ["SelectorOutcomeCache", "compile_cached"]

_COMPILE_FAILURES: dict[str, CelCompileError] = {}
_NO_ERROR: tuple[None, None] = (None, None)  # a part the device lacks: no conversion error
_EMPTY: Mapping[str, Any] = {}
# One selector of a request's chain: (group: 0 class, 1 request; its index there; the expression;
# the compiled selector, None where it does not compile; its outcome when false, or the compile error).
_Link = tuple[int, int, str, CompiledSelector | None, SelectorOutcome]


def compile_cached(expression: str, rules: Rules = NEWEST) -> CompiledSelector:
    """``compile_selector``; a CEL front-end crash on an expression is reported as a compile error.

    The front end raises ``ValueError`` for an int literal of more than 4300 digits (and could
    run out of stack on some other input): that expression does not compile, and an explanation
    says so rather than crashing. Failures are remembered, as ``compile_selector`` remembers its own.
    """
    failed = _COMPILE_FAILURES.get(expression)
    if failed is not None:
        raise CelCompileError(failed.message)
    try:
        return compile_selector(expression, rules)
    except (ValueError, RecursionError) as err:
        if len(_COMPILE_FAILURES) > 1024:
            _COMPILE_FAILURES.clear()
        failed = _COMPILE_FAILURES[expression] = CelCompileError(f"compilation failed: {type(err).__name__}: {str(err)[:200]}")
        raise CelCompileError(failed.message) from None


# cel.EnhanceRuntimeError's hint (Kubernetes 1.37+) after a "no such key" error.
_OPTIONAL_HINT = (
    ". consider using CEL optional chaining (.? followed by orValue()) or guarding the check with has() for optional fields"
)


class SelectorOutcomeCache:
    """Selector outcomes and device views by shape, for one attempt; the tables live in the explanation's :class:`ShapeCache`."""

    classes: Mapping[str, Mapping[str, Any]]
    rules: Rules
    shapes: ShapeCache

    def selector_outcome(self, ci: int, req: Request, did: DeviceID, d: Mapping[str, Any]) -> SelectorOutcome | None:
        """The first of the class's then the request's selectors that rejects the device (false or an error); None: all accept it.

        Computed once per device shape (see ``shapes.py``): the outcome never names the device.
        """
        multi = d.get("allowMultipleAllocations") if self.rules.selectors_see_multiple_allocations else None
        vkey = (did[0], id(d.get("attributes")), id(d.get("capacity")), multi)  # the view's key (see view())
        by_view = self.outcomes_by_view(ci, req)
        hit = by_view.get(vkey, NOT_STORED)
        if hit is not NOT_STORED:
            return hit
        chain = self._chain(ci, req)
        # Attributes the reader read from another map (another node's device of the same name), a few
        # strings apart (a GPU's UUID): where no selector reads those names, the outcome is the other's.
        attrs = d.get("attributes")
        derived = self.shapes.derived.get(id(attrs)) if attrs is not None else None
        if derived is not None and derived[0] is attrs:
            hit = by_view.get((vkey[0], id(derived[1]), vkey[2], multi), NOT_STORED)
            if hit is not NOT_STORED:
                read = self._names_read(ci, req, chain, did[0])
                if read is not None and read.isdisjoint(derived[2]):
                    self.shapes.alive.append(d)  # (keeps the parts alive, so the ids in vkey stay theirs)
                    by_view[vkey] = hit
                    return hit
        # A device of another view that reads the same to every selector of the chain (devices that
        # differ only in what no selector reads, a GPU's UUID, ...) has the same outcome.
        pkey = self._projection(chain, did[0], d)
        if pkey is None:
            # The view keeps the device's parts alive (shapes.views), so the ids in vkey stay theirs.
            out = by_view[vkey] = self._evaluate(chain, self.view(did, d))
            return out
        by_projection = self.shapes.projections.setdefault((ci, req.name), {})
        hit = by_projection.get(pkey, NOT_STORED)
        if hit is not NOT_STORED:
            self.shapes.alive.append(d)  # (keeps the parts alive, so the ids in vkey stay theirs)
        else:
            hit = by_projection[pkey] = self._evaluate(chain, self.view(did, d))  # (the view keeps them alive)
        by_view[vkey] = hit
        return hit

    def _names_read(self, ci: int, req: Request, chain: tuple[_Link, ...], driver: str) -> frozenset[str] | None:
        """The attribute names (with the domain and bare) the chain's selectors read of a device of ``driver`` (once per request).

        None where a selector reads the whole device, a whole map or a whole domain (as for :meth:`_projection`).
        """
        key = (ci, req.name, driver)
        known = self.shapes.names_read
        if key in known:
            return known[key]
        names: set[str] = set()
        for _, _, _, sel, _ in chain:
            if sel is None:  # it does not compile: what follows is never evaluated
                break
            pieces = sel.projector.published_names(driver)
            if pieces is None:
                known[key] = None
                return None
            for is_attr, qualified, bare in pieces:
                if is_attr:
                    names.update(n for n in (qualified, bare) if n is not None)
        out = known[key] = frozenset(names)
        return out

    def _projection(self, chain: tuple[_Link, ...], driver: str, d: Mapping[str, Any]) -> tuple[Any, ...] | None:
        """What the chain's selectors read of the device, read from its published maps; None where that cannot be told so.

        Two devices with the same key get the same outcome: either the same conversion error (which
        fails the first selector that compiles), or, for every selector, the key its own answers are
        shared by (``CompiledSelector.matches_view``). None where a selector reads the whole device,
        a whole map or domain, or the reader did not find the device's conversion error.
        """
        known = self.shapes.conversion_errors
        attrs, caps = d.get("attributes"), d.get("capacity")
        a = known.get(id(attrs)) if attrs is not None else _NO_ERROR
        c = known.get(id(caps)) if caps is not None else _NO_ERROR
        if a is None or c is None:
            return None
        error = a[1] if a[1] is not None else c[1]
        if error is not None:
            return (error,)  # (a key of one string: no other key starts with one)
        multi = bool(d.get("allowMultipleAllocations", False)) if self.rules.selectors_see_multiple_allocations else False
        out: list[Any] = [None]
        for _, _, _, sel, _ in chain:
            if sel is None:  # it does not compile: what follows is never evaluated
                break
            k = sel.projector.published_key(attrs or _EMPTY, caps or _EMPTY, driver, multi)
            if k is None:
                return None
            out.append(k)
        return tuple(out)

    def outcomes_by_view(self, ci: int, req: Request) -> dict[ViewKey, SelectorOutcome | None]:
        """The request's selector outcomes found so far, by view key (see :meth:`selector_outcome`)."""
        rkey = (ci, req.name)
        by_view = self.shapes.outcomes.get(rkey)
        if by_view is None:
            by_view = self.shapes.outcomes[rkey] = {}
        return by_view

    def _chain(self, ci: int, req: Request) -> tuple[_Link, ...]:
        """The class's then the request's selectors, compiled once per request (up to the first that does not compile)."""
        rkey = (ci, req.name)
        chain = self.shapes.chains.get(rkey)
        if chain is None:
            cls = self.classes.get(req.class_name) or {}
            class_sels = [str((x.get("cel") or {}).get("expression", "")) for x in (cls.get("spec") or {}).get("selectors") or []]
            links: list[_Link] = []
            for group, sels in ((0, class_sels), (1, req.selectors)):
                for i, expr in enumerate(sels):
                    try:
                        links.append((group, i, expr, compile_cached(expr, self.rules), SelectorOutcome(group, i, expr, "false")))
                    except CelError as err:
                        links.append((group, i, expr, None, SelectorOutcome(group, i, expr, "compile", err.kind, err.message)))
                        break
                else:
                    continue
                break
            chain = self.shapes.chains[rkey] = tuple(links)
        return chain

    @staticmethod
    def _evaluate(chain: tuple[_Link, ...], view: DeviceView) -> SelectorOutcome | None:
        for group, i, expr, sel, failed in chain:
            if sel is None:  # it does not compile
                return failed
            try:
                if not sel.matches_view(view):
                    return failed
            except CelError as err:
                return SelectorOutcome(group, i, expr, "runtime", err.kind, err.message)
        return None

    def view(self, did: DeviceID, d: Mapping[str, Any]) -> DeviceView:
        """The device as selectors see it: one view per device shape (driver, attributes, capacity, multiple allocations)."""
        sees_multi = self.rules.selectors_see_multiple_allocations
        multi = d.get("allowMultipleAllocations") if sees_multi else None
        key = (did[0], id(d.get("attributes")), id(d.get("capacity")), multi)
        views = self.shapes.views
        v = views.get(key)
        if v is None:
            if not sees_multi and "allowMultipleAllocations" in d:
                d = {k: x for k, x in d.items() if k != "allowMultipleAllocations"}
            v = views[key] = self._new_view(d, did[0])
        return v

    def _new_view(self, d: Mapping[str, Any], driver: str) -> DeviceView:
        """A view of ``d``, given its conversion error when the reader found the errors of all its parts.

        (The table keeps each part it names alive, so an id found there is that part's.)
        """
        known = self.shapes.conversion_errors
        attrs, caps = d.get("attributes"), d.get("capacity")
        a = known.get(id(attrs)) if attrs is not None else _NO_ERROR
        c = known.get(id(caps)) if caps is not None else _NO_ERROR
        lists = self.rules.list_attributes
        if a is None or c is None:
            return DeviceView.of(d, driver, lists=lists)
        return DeviceView.of(d, driver, a[1] if a[1] is not None else c[1], lists=lists)

    def runtime_error(self, where: str, i: int, did: DeviceID, message: str) -> str:
        """A selector's runtime error as the release words it (1.37+: the device named, ``EnhanceRuntimeError``'s hint)."""
        if not self.rules.selector_error_names_device:
            return f"{where}: selector #{i}: CEL runtime error: {message}"
        if "no such key:" in message:
            message += _OPTIONAL_HINT
        return f"{where}: selector #{i} on device {did[0]}/{did[1]}/{did[2]}: CEL runtime error: {message}"
