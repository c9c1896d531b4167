"""After each registration, prompt the kubelet to retry the pods that wait on this driver now, not in 60-90 s.

Why: when the kubelet syncs a pod whose claim's driver is not registered (the plugin restarting,
a node rebooting), ``PrepareResources`` fails and the kubelet's ``SyncPod`` returns without
recording an error (kuberuntime_manager.go: the failure only raises a FailedPrepareDynamicResources
Event), so the pod worker requeues the pod at its resync interval, ``syncFrequency`` (1 min) with
50 % jitter: 60-90 s, however soon the plugin registers. Registration itself starts no pod sync.
What does start one at once is a change to the pod's metadata: the kubelet's config source sends it
as an update and the pod worker syncs the pod immediately.

So, once the kubelet has told us we are registered (``NotifyRegistrationStatus``, which it sends
after its DRA manager has added the plugin), this module lists the node's pods whose containers do
not all run (Pending, or Running again after a reboot), keeps those with a claim allocated from this
driver, and sets one annotation on each
(``<driver>/prepare-retry``, the time); that is all it writes. The kubelet then prepares their
claims as it would have at its next resync: nothing about preparation changes (its checks, the
checkpoint, the serializing lock), only when the kubelet asks. Best effort: a refusal (the chart's
``kubeletPlugin.retryWaitingPods`` off, so no RBAC) or any error is logged and the pod waits for the
kubelet's resync as before.

Started by ``kubelet_plugin.main`` (``--retry-waiting-pods``, default true); woken by
``kubelet_plugin.registration.RegistrationServicer``.
"""

from __future__ import annotations

import datetime
import re
import threading
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import structlog

log = structlog.get_logger(__name__)

ANNOTATION = "prepare-retry"
"""The annotation's name, under the driver's name as prefix: ``<driver>/prepare-retry``."""
MAX_PODS = 256
"""Pods prompted per registration at most (a node runs far fewer GPU pods)."""
_MAX_NAME = 253
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class PodApi(Protocol):
    """The calls this module makes: the node's pods, one claim, one pod's annotations."""

    def pending_pods(self, node: str) -> list[dict[str, Any]]:
        """The pods bound to ``node`` that have not ended (``waits`` picks the waiting ones)."""
        ...

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        """One ResourceClaim; raises when it cannot be read."""
        ...

    def annotate(self, namespace: str, name: str, key: str, value: str) -> None:
        """Set one annotation on one pod (a merge patch of its metadata, nothing else)."""
        ...


def _obj(value: object) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one (a malformed field reads as absent)."""
    return value if isinstance(value, dict) else {}


def _objs(value: object) -> list[dict[str, Any]]:
    """The objects of a JSON list (anything else in it, or a value that is no list, reads as absent)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _name(value: object) -> str | None:
    """``value`` if it can be an object's name or namespace (a DNS subdomain), else None."""
    if isinstance(value, str) and 0 < len(value) <= _MAX_NAME and _DNS_SUBDOMAIN.fullmatch(value):
        return value
    return None


def claim_names(pod: dict[str, Any]) -> list[str]:
    """The names of the pod's ResourceClaims: direct ones, and those made from templates (status); malformed ones skipped."""
    names = [c.get("resourceClaimName") for c in _objs(_obj(pod.get("spec")).get("resourceClaims"))]
    names += [s.get("resourceClaimName") for s in _objs(_obj(pod.get("status")).get("resourceClaimStatuses"))]
    return list(dict.fromkeys(n for n in map(_name, names) if n is not None))


def waits(pod: dict[str, Any]) -> bool:
    """A pod with claims, not being deleted, whose containers do not all run: Pending, or Running after a reboot.

    After a reboot a pod that ran keeps its phase Running while the kubelet starts it again.
    """
    meta, spec, status = _obj(pod.get("metadata")), _obj(pod.get("spec")), _obj(pod.get("status"))
    if meta.get("deletionTimestamp") or not spec.get("resourceClaims"):
        return False
    phase = status.get("phase")
    if phase == "Pending":
        return True
    containers = status.get("containerStatuses") or []
    if not isinstance(containers, list):
        return False  # unreadable: not known to wait
    return phase == "Running" and (not containers or not all("running" in _obj(_obj(c).get("state")) for c in containers))


def uses_driver(claim: dict[str, Any], driver: str, node: str) -> bool:
    """The claim has a device of ``driver`` allocated from this node's pool."""
    results = _objs(_obj(_obj(_obj(claim.get("status")).get("allocation")).get("devices")).get("results"))
    return any(r.get("driver") == driver and r.get("pool") == node for r in results)


def prompt_waiting_pods(api: PodApi, *, driver: str, node: str, now: Callable[[], str] | None = None) -> list[str]:
    """Annotate the node's waiting pods with a claim of ``driver``; return them (``namespace/name``). Raises API errors.

    A pod of another node (``spec.nodeName``), or one without a readable name and namespace, is skipped.
    """
    stamp = (now or _utc_now)()
    done: list[str] = []
    pods = api.pending_pods(node)
    for namespace, name in _ours(api, pods if isinstance(pods, list) else [], driver, node):
        api.annotate(namespace, name, f"{driver}/{ANNOTATION}", stamp)
        done.append(f"{namespace}/{name}")
        if len(done) >= MAX_PODS:
            break
    return done


def _ours(api: PodApi, pods: Iterable[object], driver: str, node: str) -> Iterable[tuple[str, str]]:
    """``(namespace, name)`` of each pod of ``node`` that waits on a claim of ``driver``, each once."""
    seen: set[tuple[str, str]] = set()
    for pod in pods:
        if not isinstance(pod, dict) or _obj(pod.get("spec")).get("nodeName") != node or not waits(pod):
            continue
        meta = _obj(pod.get("metadata"))
        namespace, pod_name = _name(meta.get("namespace")), _name(meta.get("name"))
        if namespace is None or pod_name is None or (namespace, pod_name) in seen:
            continue
        for name in claim_names(pod):
            try:
                claim = api.get_claim(namespace, name)
            except Exception as err:  # noqa: BLE001 - a claim not created yet, or gone: that pod waits as before
                log.debug("waiting_pod_claim_unreadable", claim=f"{namespace}/{name}", error=str(err))
                continue
            if isinstance(claim, dict) and uses_driver(claim, driver, node):
                seen.add((namespace, pod_name))
                yield namespace, pod_name
                break


def _utc_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class RetryPrompter:
    """A thread that prompts the waiting pods after each registration (``registered`` wakes it)."""

    def __init__(self, api: Callable[[], PodApi], *, driver: str, node: str, ready: Callable[[], bool] = lambda: True) -> None:
        """``api`` is called on the thread, once (it may wait for the API client to load).

        A prompt waits until ``ready()`` (the plugin has recovered its state, ``kubelet_plugin.start_gate``):
        the kubelet registers the plugin before that, and the prepare calls a prompt causes would wait.
        """
        self._api_factory = api
        self._driver = driver
        self._node = node
        self._ready = ready
        self._wake = threading.Event()
        self.rounds = 0

    @classmethod
    def over_link(
        cls,
        client: Callable[[], Any],
        get_claim: Callable[[str, str], dict[str, Any]],
        *,
        driver: str,
        node: str,
        ready: Callable[[], bool] = lambda: True,
    ) -> RetryPrompter:
        """The plugin's prompter: ``client`` (``ApiLink.wait``) is called on the prompter's thread, once."""

        def api() -> PodApi:
            from dra_driver.kube.pods_api import KubePodApi  # loaded on the prompter's thread, off the start-up path

            return KubePodApi(client(), get_claim)

        return cls(api, driver=driver, node=node, ready=ready)

    def registered(self) -> None:
        """The kubelet accepted the registration: prompt the waiting pods (on the thread)."""
        self._wake.set()

    def start(self, stop: threading.Event) -> threading.Thread:
        """The thread, running until ``stop``."""
        thread = threading.Thread(target=self._run, args=(stop,), name="retry-waiting-pods", daemon=True)
        thread.start()
        return thread

    def _run(self, stop: threading.Event) -> None:
        api: PodApi | None = None
        while not stop.is_set():
            if not self._wake.wait(0.5):
                continue
            if not self._ready():  # still recovering: prompt once it has (the wake stays set)
                stop.wait(0.05)
                continue
            self._wake.clear()
            try:
                api = api or self._api_factory()
                pods = prompt_waiting_pods(api, driver=self._driver, node=self._node)
                log.info("waiting_pods_prompted", pods=pods)
            except Exception as err:  # noqa: BLE001 - best effort: the kubelet's own resync still comes
                log.warning("waiting_pods_not_prompted", error=str(err), hint="the chart's kubeletPlugin.retryWaitingPods RBAC")
            self.rounds += 1
