"""``dra-gpu cordon`` / ``uncordon`` by local withholding, where the API server serves no DeviceTaintRule.

The cordon is recorded in the Node's annotation ``<driver>/cordoned-devices``
(``dra_driver.core.local_cordon``): device name -> reason. The node's kubelet plugin
(``dra_driver.appkit.local_cordon``) then stops publishing the device (a GPU with its MIG
devices) until uncordoned, so the scheduler allocates it to no new claim. Claims that hold it keep
it: withholding cannot evict, so ``--evict`` is refused here (exit 2, nothing changed). The Node is
read and patched with its ``resourceVersion`` (a merge patch; a conflict is read again, three
tries), so two admins cordoning at once both land. A malformed annotation (which makes the plugin
withhold every device) is not overwritten: the admin is told to fix or remove it.

Called by ``dra_driver.cli.cordon`` (which chooses this mode: ``--local``, or a server without the
DeviceTaintRule API) and ``dra_driver.cli.top`` (:func:`local_cordons`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from dra_driver.core.cordon import CordonedDevice, CordonError
from dra_driver.core.local_cordon import MalformedCordons, annotation_key, node_cordons, render

if TYPE_CHECKING:
    from dra_driver.kube.node_api import KubeNodeApi

EFFECT_WITHHELD = "withheld"  # top's and uncordon's word for a local cordon's "effect"


def evict_refusal(server: str, forced: bool) -> str:
    """Why ``--evict`` cannot be done by local withholding."""
    why = "--local was given" if forced else f"the API server ({server}) serves no DeviceTaintRule API"
    return (
        f"--evict needs a DeviceTaintRule (NoExecute), and {why}: a cordon by local withholding only stops "
        "new claims (the plugin stops publishing the device); it cannot evict the pods using it. Cordon "
        "without --evict, then drain those pods yourself (kubectl delete pod), or use a server with DeviceTaintRules "
        "(DRADeviceTaintRules: GA in 1.37; beta, off by default, in 1.36). "
        "Nothing was changed"
    )


def fallback_note(server: str) -> str:
    """What the admin is told when ``cordon`` falls back to local withholding by itself."""
    return (
        f"note: the API server ({server}) serves no DeviceTaintRule API (DRADeviceTaintRules: GA in 1.37, "
        "off by default in 1.35-1.36, absent in 1.34): cordoned by local withholding instead (the Node's "
        "annotation; the node's kubelet plugin stops publishing the device at its next check)"
    )


def _read(nodes: KubeNodeApi, node: str, driver: str) -> tuple[dict[str, str], str]:
    """The node's recorded cordons and its resourceVersion; CordonError for a malformed annotation."""
    from dra_driver.kube.rest import KubeApiError

    try:
        obj = nodes.get_node(node)
    except KubeApiError as err:
        if err.not_found:
            raise CordonError(f"node {node!r} not found") from None
        raise
    try:
        entries = node_cordons(obj, driver)
    except MalformedCordons as err:
        key = annotation_key(driver)
        raise CordonError(
            f"node {node}'s annotation {key} is malformed ({err}), so its plugin withholds every device: "
            f"fix it or remove it (kubectl annotate node {node} {key}-) first"
        ) from None
    return entries, str((obj.get("metadata") or {}).get("resourceVersion") or "")


def update(nodes: KubeNodeApi, node: str, driver: str, device: str, reason: str | None) -> tuple[bool, bool]:
    """Record (``reason``) or drop (None) ``device``'s cordon on ``node``: (was it there before, did anything change)."""
    from dra_driver.kube.rest import KubeApiError

    tries_left = 3
    while True:
        entries, version = _read(nodes, node, driver)
        before = device in entries
        want = dict(entries)
        if reason is None:
            want.pop(device, None)
        else:
            want[device] = reason
        if want == entries:
            return before, False
        try:
            nodes.set_annotation(node, annotation_key(driver), render(want), resource_version=version)
        except KubeApiError as err:  # the Node changed between the read and the patch: read again
            tries_left -= 1
            if not err.conflict or tries_left == 0:
                raise
            continue
        return before, True


def recorded(nodes: KubeNodeApi, node: str, driver: str) -> dict[str, str]:
    """The devices cordoned locally on ``node`` (see :func:`_read`)."""
    return _read(nodes, node, driver)[0]


def local_cordons(nodes: Iterable[Mapping[str, Any]]) -> list[CordonedDevice]:
    """The local cordons recorded on ``nodes`` (Nodes as JSON), any driver; a malformed annotation reads as ``*``."""
    out = []
    suffix = annotation_key("")
    for n in nodes:
        meta = n.get("metadata") or {}
        name = str(meta.get("name") or "")
        for key in sorted(meta.get("annotations") or {}):
            if not key.endswith(suffix) or key == suffix:
                continue
            driver = key[: -len(suffix)]
            try:
                entries = node_cordons(n, driver)
            except MalformedCordons as err:
                entries = {"*": f"every device withheld: annotation {key} is malformed ({err})"}
            out += [CordonedDevice("", driver, name, dev, dev, EFFECT_WITHHELD, why) for dev, why in sorted(entries.items())]
    return out
