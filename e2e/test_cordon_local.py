"""Per-GPU cordon by local withholding, end to end, on a release that serves no DeviceTaintRule (stock v1.34).

Control plane and kubelet are the upstream v1.34 binaries started stock (default feature gates
and API versions: no DeviceTaintRule API), the fake container runtime, and our plugin publishing
8 fake H100s on node-a, checking its Node every second. ``dra-gpu cordon`` runs as a process, as an
admin runs it:

- ``--evict`` is refused (exit 2) naming the gate, and nothing changes;
- ``cordon node-a gpu-X`` (X: the GPU of a running pod) falls back by itself, with a note: the
  Node gets the annotation, the plugin stops publishing gpu-X; the running pod keeps it (no
  eviction); a pod whose claim only gpu-X fits stays Pending; a plain pod gets another GPU;
  ``dra-gpu top``'s cordon lines and ``explain``'s notes show it;
- ``uncordon``: gpu-X is published again and the waiting pod gets it.

Timings go to stdout (``-s``): cordon -> gpu-X gone from the slice, cordon -> scheduler refuses,
uncordon -> the waiting pod Running. The machine is shared: compare within one run only.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from dra_driver.core.local_cordon import annotation_key
from e2e.test_cordon import _pod, dra_gpu
from e2e.test_kubelet_node import PODS, RESOURCE, Harness, wait_until
from testkit.claimdata import DRIVER
from testkit.cluster import LocalCluster
from testkit.node import KubeletNode

VERSION = "v1.34.4"
KEY = annotation_key(DRIVER)


def test_cordon_withholds_a_gpu_where_no_device_taint_rule_is_served(tmp_path: Path) -> None:
    with LocalCluster(
        stock=True, version=VERSION, with_scheduler=True, with_controller_manager=True, log_dir=tmp_path / "logs"
    ) as c:
        h = Harness(c, tmp_path)
        node = h.nodes["node-a"] = KubeletNode(c, "node-a", tmp_path / "node-a")
        node.start()
        try:
            _scenario(h, c)
        finally:
            for plugin in h.plugins.values():
                plugin.stop()
            node.stop()


def _published(c: LocalCluster) -> set[str]:
    items = c.api("GET", f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName=node-a")["items"]
    return {d["name"] for s in items if s["spec"]["driver"] == DRIVER for d in s["spec"].get("devices") or []}


def _device_of(c: LocalCluster, pod: dict[str, Any]) -> str:
    (status,) = pod["status"]["resourceClaimStatuses"]
    claim = c.api("GET", f"{RESOURCE}/namespaces/default/resourceclaims/{status['resourceClaimName']}")
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    return str(result["device"])


def _scenario(h: Harness, c: LocalCluster) -> None:
    assert "devicetaintrules" not in json.dumps(c.api("GET", f"{RESOURCE}")), "v1.34 stock should serve no DeviceTaintRule"
    h.start_plugin(h.nodes["node-a"], ("--local-cordon-check-interval", "1"))
    h.create_class_and_template()
    kc = c.kubeconfig

    h.create_gpu_pod("busy")
    busy = h.wait_running("busy")
    victim = _device_of(c, busy)
    slices = c.api("GET", f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName=node-a")["items"]
    uuids = {d["name"]: d["attributes"]["uuid"]["string"] for s in slices for d in s["spec"].get("devices") or []}
    only = {"cel": {"expression": f'device.attributes["{DRIVER}"].uuid == "{uuids[victim]}"'}}
    request = {"name": "gpu", "exactly": {"deviceClassName": DRIVER, "selectors": [only]}}
    template = {"metadata": {"name": "victim-only"}, "spec": {"spec": {"devices": {"requests": [request]}}}}
    c.api("POST", f"{RESOURCE}/namespaces/default/resourceclaimtemplates", template)

    # --evict cannot be done by withholding: refused, nothing changed.
    done = dra_gpu(kc, "cordon", "node-a", victim, "--evict")
    assert done.returncode == 2 and "DRADeviceTaintRules" in done.stderr and "Nothing was changed" in done.stderr, done
    assert KEY not in (c.api("GET", "/api/v1/nodes/node-a")["metadata"].get("annotations") or {})

    # Cordon: falls back with a note; the plugin stops publishing the GPU; the running pod keeps it.
    t0 = time.monotonic()
    done = dra_gpu(kc, "cordon", "node-a", victim, "--reason", "fan failure")
    t_cli = time.monotonic() - t0
    assert done.returncode == 0 and "by local withholding" in done.stdout, done
    assert "serves no DeviceTaintRule API" in done.stderr and VERSION in done.stderr, done.stderr
    notes = c.api("GET", "/api/v1/nodes/node-a")["metadata"]["annotations"]
    assert json.loads(notes[KEY]) == {victim: "fan failure"}
    wait_until(f"{victim} to leave node-a's slice", lambda: victim not in _published(c), h.diagnostics, timeout=30)
    t_withheld = time.monotonic() - t0
    assert _published(c) == {f"gpu-{i}" for i in range(8)} - {victim}

    from dra_driver.cli.cordon import cordon_lines  # what dra-gpu top shows
    from dra_driver.kube.taint_rules_api import connect

    (shown,) = cordon_lines(connect(str(kc)), ["node-a"])
    assert (shown.pool, shown.device, shown.effect, shown.reason) == ("node-a", victim, "withheld", "fan failure")

    c.api("POST", PODS, _pod("pinned", "victim-only"))

    def unschedulable() -> str | None:
        conds = c.api("GET", f"{PODS}/pinned").get("status", {}).get("conditions") or []
        return next((x.get("message", "?") for x in conds if x["type"] == "PodScheduled" and x["status"] == "False"), None)

    why = wait_until("the victim-only pod to be refused by the scheduler", unschedulable, h.diagnostics)
    t_refused = time.monotonic() - t0
    h.create_gpu_pod("plain")
    plain = h.wait_running("plain")
    assert _device_of(c, plain) not in (victim,), "a new claim got the withheld GPU"
    busy_now = c.api("GET", f"{PODS}/busy")
    assert busy_now["status"]["phase"] == "Running" and not busy_now["metadata"].get("deletionTimestamp"), "withholding evicted"
    assert _device_of(c, busy_now) == victim

    explained = dra_gpu(kc, "explain", "pod/pinned")
    assert (
        f"node node-a withholds {DRIVER} devices cordoned locally, not published: {victim} (fan failure)" in explained.stderr
    ), explained

    # Uncordon: published again; the waiting pod gets it (the busy pod's claim is released first).
    c.api("DELETE", f"{PODS}/busy?gracePeriodSeconds=0")
    t1 = time.monotonic()
    done = dra_gpu(kc, "uncordon", "node-a", victim)
    assert done.returncode == 0 and "uncordoned" in done.stdout, done
    assert KEY not in (c.api("GET", "/api/v1/nodes/node-a")["metadata"].get("annotations") or {})
    wait_until(f"{victim} to be published again", lambda: victim in _published(c), h.diagnostics, timeout=30)
    t_back = time.monotonic() - t1
    pinned = h.wait_running("pinned", timeout=120)
    t_uncordon = time.monotonic() - t1
    assert _device_of(c, pinned) == victim
    print(
        f"\nlocal cordon timings ({VERSION} stock, 8 fake H100s, plugin checks its Node every 1 s; shared machine): "
        f"cordon CLI {t_cli:.2f}s; cordon -> {victim} gone from the slice {t_withheld:.2f}s; cordon -> scheduler "
        f"refuses it {t_refused:.2f}s ({why[:80]}); uncordon -> published {t_back:.2f}s, waiting pod Running on it "
        f"{t_uncordon:.2f}s"
    )
