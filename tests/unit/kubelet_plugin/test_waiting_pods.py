"""After a registration, the node's waiting pods with a claim of this driver get one annotation, nothing else."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from kubelet_plugin.registration import RegistrationServicer
from kubelet_plugin.waiting_pods import MAX_PODS, RetryPrompter, claim_names, prompt_waiting_pods, uses_driver, waits
from proto.pluginregistration import api_pb2 as reg

DRIVER = "gpu.dra-gpu.dev"
NODE = "node-a"


def pod(
    name: str, *, phase: str = "Pending", claims: tuple[str, ...] = ("c",), deleting: bool = False, states: tuple[str, ...] = ()
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns"}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-27T00:00:00Z"
    status: dict[str, Any] = {"phase": phase, "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": c} for c in claims]}
    if states:
        status["containerStatuses"] = [{"name": f"c{i}", "state": {state: {}}} for i, state in enumerate(states)]
    return {
        "metadata": meta,
        "spec": {"nodeName": NODE, "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}] if claims else []},
        "status": status,
    }


def claim(driver: str = DRIVER, pool: str = NODE) -> dict[str, Any]:
    return {"status": {"allocation": {"devices": {"results": [{"driver": driver, "pool": pool, "device": "gpu-0"}]}}}}


class FakeApi:
    def __init__(self, pods: list[dict[str, Any]], claims: dict[str, dict[str, Any]]) -> None:
        self.pods = pods
        self.claims = claims
        self.patched: list[tuple[str, str, str, str]] = []
        self.listed: list[str] = []

    def pending_pods(self, node: str) -> list[dict[str, Any]]:
        self.listed.append(node)
        return self.pods

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        if name not in self.claims:
            raise LookupError(f"claim {namespace}/{name} not found")
        return self.claims[name]

    def annotate(self, namespace: str, name: str, key: str, value: str) -> None:
        self.patched.append((namespace, name, key, value))


def test_only_waiting_pods_with_an_allocated_claim_of_this_driver_on_this_node_are_annotated() -> None:
    api = FakeApi(
        [
            pod("ours", claims=("mine",)),
            pod("other-driver", claims=("theirs",)),
            pod("other-pool", claims=("elsewhere",)),
            pod("unallocated", claims=("missing",)),
            pod("running", phase="Running", claims=("mine",), states=("running", "running")),
            pod("rebooted", phase="Running", claims=("mine",), states=("running", "waiting")),
            pod("succeeded", phase="Succeeded", claims=("mine",), states=("terminated",)),
            pod("deleting", deleting=True, claims=("mine",)),
            pod("no-claims", claims=()),
            pod("mixed", claims=("theirs", "mine")),
        ],
        {"mine": claim(), "theirs": claim(driver="other.example.com"), "elsewhere": claim(pool="node-b")},
    )
    done = prompt_waiting_pods(api, driver=DRIVER, node=NODE, now=lambda: "T")
    assert ["ns/ours", "ns/rebooted", "ns/mixed"] == done
    key = f"{DRIVER}/prepare-retry"
    assert [("ns", "ours", key, "T"), ("ns", "rebooted", key, "T"), ("ns", "mixed", key, "T")] == api.patched
    assert [NODE] == api.listed


def test_at_most_max_pods_are_annotated_per_round() -> None:
    api = FakeApi([pod(f"p{i}", claims=("mine",)) for i in range(MAX_PODS + 5)], {"mine": claim()})
    assert MAX_PODS == len(prompt_waiting_pods(api, driver=DRIVER, node=NODE))


def test_claim_names_come_from_direct_claims_and_template_statuses_once_each() -> None:
    p = pod("p", claims=("from-template",))
    p["spec"]["resourceClaims"].append({"name": "direct", "resourceClaimName": "shared"})
    p["status"]["resourceClaimStatuses"].append({"name": "direct", "resourceClaimName": "shared"})
    assert ["shared", "from-template"] == claim_names(p)


def test_waits_and_uses_driver_tolerate_missing_fields() -> None:
    assert not waits({})
    assert not uses_driver({}, DRIVER, NODE)
    assert not uses_driver({"status": {"allocation": None}}, DRIVER, NODE)


def test_a_pod_of_another_node_or_none_is_never_annotated() -> None:
    # The list is field-selected to this node server-side; a proxy or a skewed server may answer more.
    other, unbound = pod("other-node", claims=("mine",)), pod("unbound", claims=("mine",))
    other["spec"]["nodeName"] = "node-b"
    del unbound["spec"]["nodeName"]
    api = FakeApi([other, unbound, pod("ours", claims=("mine",))], {"mine": claim()})
    assert ["ns/ours"] == prompt_waiting_pods(api, driver=DRIVER, node=NODE, now=lambda: "T")
    assert [("ns", "ours", f"{DRIVER}/prepare-retry", "T")] == api.patched


def test_malformed_pods_are_skipped_and_the_rest_still_prompted() -> None:
    bad: list[Any] = [None, [], "pod", {"metadata": None, "spec": {"nodeName": NODE}}]
    for meta in ({"name": "x"}, {"namespace": "ns"}, {"name": 5, "namespace": "ns"}, {"name": "../x", "namespace": "ns"}):
        p = pod("x", claims=("mine",))
        p["metadata"] = meta
        bad.append(p)
    for field, value in (("resourceClaimStatuses", "mine"), ("resourceClaimStatuses", [None, {"resourceClaimName": 7}])):
        p = pod("odd-claims", claims=("mine",))
        p["status"][field] = value
        bad.append(p)
    states = pod("odd-states", phase="Running", claims=("mine",), states=("waiting",))
    states["status"]["containerStatuses"] = [None, {"state": []}]
    odd_claim = pod("odd-claim", claims=("broken",))
    api = FakeApi([*bad, states, odd_claim, pod("ours", claims=("mine",)), pod("ours", claims=("mine",))],
                  {"mine": claim(), "broken": {"status": {"allocation": {"devices": None}}}})  # fmt: skip
    assert ["ns/odd-states", "ns/ours"] == prompt_waiting_pods(api, driver=DRIVER, node=NODE, now=lambda: "T")


def test_a_registration_wakes_the_prompter_and_an_api_error_is_logged_not_raised() -> None:
    calls: list[str] = []

    class Failing(FakeApi):
        def pending_pods(self, node: str) -> list[dict[str, Any]]:
            calls.append(node)
            raise PermissionError("pods is forbidden")

    prompter = RetryPrompter(lambda: Failing([], {}), driver=DRIVER, node=NODE)
    servicer = RegistrationServicer(DRIVER, "/p/dra.sock", on_registered=prompter.registered)
    stop = threading.Event()
    thread = prompter.start(stop)
    try:
        servicer.NotifyRegistrationStatus(reg.RegistrationStatus(plugin_registered=False, error="no"), None)  # type: ignore[arg-type]
        time.sleep(0.3)
        assert [] == calls  # a refused registration prompts nothing
        servicer.NotifyRegistrationStatus(reg.RegistrationStatus(plugin_registered=True), None)  # type: ignore[arg-type]
        deadline = time.monotonic() + 5
        while prompter.rounds < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert [NODE] == calls and 1 == prompter.rounds and thread.is_alive()
        servicer.NotifyRegistrationStatus(reg.RegistrationStatus(plugin_registered=True), None)  # type: ignore[arg-type]
        while prompter.rounds < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert [NODE, NODE] == calls  # each registration (a kubelet restart re-registers) prompts again
    finally:
        stop.set()
        thread.join(2)
    assert not thread.is_alive()


@pytest.mark.parametrize("value", ["true", "false"])
def test_the_flag_turns_it_on_and_off(value: str) -> None:
    from kubelet_plugin.settings import parse

    settings = parse(["--node-name", NODE, "--fake-gpus", "h100x8", "--retry-waiting-pods", value])
    assert settings.retry_waiting_pods is (value == "true")


def test_over_link_waits_for_the_client_on_the_prompters_thread_and_reads_claims_through_the_link() -> None:
    """The client (``ApiLink.wait``) is not asked for before a registration; claims go through the link's reader."""
    asked: list[str] = []

    def client() -> object:
        asked.append(threading.current_thread().name)
        raise RuntimeError("no API server here")

    prompter = RetryPrompter.over_link(client, lambda ns, name: claim(), driver=DRIVER, node=NODE)
    stop = threading.Event()
    thread = prompter.start(stop)
    try:
        time.sleep(0.2)
        assert [] == asked
        prompter.registered()
        deadline = time.monotonic() + 5
        while prompter.rounds < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ["retry-waiting-pods"] == asked  # failed, logged, the thread lives on
        assert thread.is_alive()
    finally:
        stop.set()
        thread.join(2)


def test_a_registration_before_recovery_prompts_only_once_the_state_is_recovered() -> None:
    """The kubelet registers the plugin while it still recovers: the prompt waits, so no prepare it causes is held or refused."""
    api = FakeApi([pod("ours")], {"c": claim()})
    recovered = threading.Event()
    prompter = RetryPrompter(lambda: api, driver=DRIVER, node=NODE, ready=recovered.is_set)
    stop = threading.Event()
    thread = prompter.start(stop)
    try:
        prompter.registered()
        time.sleep(0.4)
        assert ([], 0) == (api.patched, prompter.rounds)
        recovered.set()
        deadline = time.monotonic() + 5
        while prompter.rounds < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ["ours"] == [name for _, name, _, _ in api.patched]
    finally:
        stop.set()
        thread.join(2)
    assert not thread.is_alive()
