"""The plugin-on-a-GPU run of ``make gpu-check``, step by step, into one report.

Called by ``scripts/gpu_check.py``. On a GPU machine (``fake_gpus`` None) the plugin reads the
GPUs through NVML and a torch workload runs under the claim's CDI spec; with ``fake_gpus`` (the
self-test, ``--fake-gpus h100x8``) the same steps run against the plugin's fake GPUs, the CUDA
workload is skipped by design and the fake GPUs' usage script stands in for its load. Steps:

``apiserver`` (the stand-in, HTTPS with a certificate ``openssl`` makes, holding the node's Node object) →
``plugin-start`` (the real plugin process) → ``registration`` (GetInfo, NotifyRegistrationStatus)
→ ``slices`` (the ResourceSlices it publishes name every GPU it found) → ``prepare`` (a claim
allocated to the first GPU, NodePrepareResources, the CDI spec checked: valid, the GPU's UUID,
device nodes that exist) → ``device-status`` (the claim's ``status.devices``) → ``dev-probe``
(what ``/dev`` holds under the spec, in a private mount namespace) → ``workload`` and
``metrics-busy`` (the claim's utilization in ``/metrics`` while it runs) → ``metrics-idle`` (its
idle clock starting after) → ``unprepare`` (the spec and the metrics row gone) →
``prepare-latency`` (more claims, one at a time) → ``plugin-stop`` (SIGTERM, exit 0, sockets
gone) → ``api-calls`` (what the plugin asked the stand-in).

A failed step that later ones need ends the run (they are reported ``not-run``); every step is
in the report with its status (passed, failed, skipped, skipped-by-design, not-run), seconds and
what it saw. Nothing here changes a GPU's MIG mode, compute mode, clocks, power or time-slicing,
resets it or starts MPS.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dra_driver.core.cdi import spec_file_name, validate_spec
from dra_driver.core.driver import DEFAULT_DRIVER_NAME
from dra_driver.core.schema import ATTR_TYPE, ATTR_UUID, DEVICE_TYPE_GPU
from dra_driver.obs.scrape import ClaimDevice, ScrapeError, fetch, parse
from testkit.gpu_check import workload
from testkit.gpu_check.apiserver import StandInApiServer, parse_target
from testkit.gpu_check.kubelet import Kubelet
from testkit.gpu_check.plugin import REPO, PluginRun

NAMESPACE = "gpu-check"
POD = "gpu-check-workload"
BUSY_RATIO = 0.5
"""The utilization the claim's row must reach while the workload runs (a matmul loop keeps a GPU near 1.0)."""


class StepFailed(Exception):
    """The step saw something wrong; the message says what."""


class StepSkipped(Exception):
    """The step does not apply here; the message says why."""

    def __init__(self, reason: str, *, by_design: bool = False) -> None:
        super().__init__(reason)
        self.by_design = by_design


@dataclass
class Options:
    """What one run does."""

    out: Path
    fake_gpus: str | None = None
    plugin_python: str = sys.executable
    workload_python: str = sys.executable
    workload_seconds: float = 10.0
    latency_claims: int = 20
    node: str = "gpu-check-node"
    driver: str = DEFAULT_DRIVER_NAME
    plugin_args: tuple[str, ...] = ()
    workload_mode: str | None = None
    """``namespace``, ``process``, or None (namespace where it can run)."""


@dataclass
class _Run:
    opts: Options
    steps: list[dict[str, Any]] = field(default_factory=list)
    server: StandInApiServer | None = None
    plugin: PluginRun | None = None
    kubelet: Kubelet | None = None
    gpu_uuids: list[str] = field(default_factory=list)
    device: str = ""
    device_uuid: str = ""
    claim: tuple[str, str, str] = ("", "", "")
    spec: dict[str, Any] = field(default_factory=dict)
    metrics_url: str = ""
    state: Path | None = None
    aborted: str = ""

    busy: list[tuple[float, float]] = field(default_factory=list)
    """(seconds since the load started, the claim's utilization) per scrape while loaded."""

    def do(self, name: str, fn: Callable[[_Run, dict[str, Any]], None], *, critical: bool) -> None:
        """Run one step into the report; after a critical step failed, later ones are ``not-run``."""
        rec: dict[str, Any] = {"name": name, "status": "passed"}
        self.steps.append(rec)
        if self.aborted:
            rec.update(status="not-run", reason=self.aborted, seconds=0.0)
            return
        t0 = time.monotonic()
        try:
            fn(self, rec)
        except StepSkipped as s:
            rec.update(status="skipped-by-design" if s.by_design else "skipped", reason=str(s))
        except Exception as err:
            rec.update(status="failed", error=str(err) if isinstance(err, StepFailed) else f"{type(err).__name__}: {err}")
            if critical:
                self.aborted = f"{name} failed"
        finally:
            rec["seconds"] = round(time.monotonic() - t0, 3)


def _wait(what: str, check: Callable[[], Any], timeout_s: float, every_s: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise StepFailed(f"{what}: not seen within {timeout_s:g}s")
        time.sleep(every_s)


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


# -- the steps: each gets the run and its report entry, raises StepFailed or StepSkipped ----------


def _script(script: str, args: list[str]) -> Callable[[_Run, dict[str, Any]], None]:
    """A read-only NVML check script, run as a process (its output kept in the run folder)."""

    def step(run: _Run, rec: dict[str, Any]) -> None:
        if run.opts.fake_gpus:
            raise StepSkipped("reads real GPUs through NVML; fake GPUs have none", by_design=True)
        out = run.opts.out
        cmd = [run.opts.plugin_python, str(REPO / "scripts" / script), *(a.replace("{out}", str(out)) for a in args)]
        # The script imports dra_driver: the checkout goes on PYTHONPATH, as for the plugin (a bare
        # python3 on a GPU machine has nothing installed; the script's own folder is not the repo root).
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
        log = out / f"{Path(script).stem}.log"
        log.write_text(f"$ {' '.join(cmd)}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")
        rec.update(command=cmd, exit_code=proc.returncode, output=str(log))
        try:
            rec["stdout_json"] = json.loads(proc.stdout)
        except ValueError:
            rec["stdout_tail"] = proc.stdout[-2000:]
        if proc.returncode != 0:
            raise StepFailed(f"{script} exited {proc.returncode}: {proc.stderr[-1000:]}")

    return step


def _apiserver(run: _Run, rec: dict[str, Any]) -> None:
    if shutil.which("openssl") is None:  # dra-gpu refuses a plain-http kubeconfig server unless it is marked insecure
        raise StepFailed("openssl is not on PATH: it makes the stand-in API server's certificate")
    run.server = StandInApiServer(tls_dir=run.opts.out / "run" / "tls")
    run.server.start()
    run.server.put("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": run.opts.node}})
    rec.update(url=run.server.url, node=run.opts.node)


def _plugin_start(run: _Run, rec: dict[str, Any]) -> None:
    assert run.server is not None
    base = run.opts.out / "run"
    kubeconfig = run.server.write_kubeconfig(base / "kubeconfig")
    run.state = Path(tempfile.mkdtemp(prefix="dra-gpu-check-"))  # sockets: a short path, whatever --out is
    run.plugin = PluginRun(
        base=base,
        state=run.state,
        kubeconfig=kubeconfig,
        node=run.opts.node,
        driver=run.opts.driver,
        fake_gpus=run.opts.fake_gpus,
        python=run.opts.plugin_python,
        extra_args=run.opts.plugin_args,
    )
    rec["argv"] = run.plugin.argv()
    rec["started_in_s"] = round(run.plugin.start(), 3)
    found = run.plugin.event("gpus_found") or {}
    run.gpu_uuids = [str(u) for u in found.get("uuids") or []]
    run.metrics_url = run.plugin.metrics_url()
    rec.update(source=found.get("source"), gpus=run.gpu_uuids, metrics=run.metrics_url)
    if not run.gpu_uuids:
        raise StepFailed("the plugin found no GPU")
    refusing = run.plugin.event("plugin_refusing")
    if refusing is not None:
        raise StepFailed(f"the plugin refuses to prepare claims: {refusing.get('reason')}")


def _registration(run: _Run, rec: dict[str, Any]) -> None:
    assert run.plugin is not None
    paths = run.plugin.sockets
    run.kubelet = Kubelet(paths.registration, paths.dra)
    info = run.kubelet.register()
    rec.update(type=info.type, plugin_name=info.name, endpoint=info.endpoint, versions=list(info.versions))
    if info.name != run.opts.driver or Path(info.endpoint) != paths.dra:
        raise StepFailed(f"GetInfo answered {info.name} at {info.endpoint}; expected {run.opts.driver} at {paths.dra}")


def _node_slices(run: _Run) -> list[dict[str, Any]]:
    assert run.server is not None
    return [
        s
        for s in run.server.objects("resourceslices")
        if (s.get("spec") or {}).get("nodeName") == run.opts.node and (s.get("spec") or {}).get("driver") == run.opts.driver
    ]


def _attr(device: dict[str, Any], name: str) -> str:
    value = (device.get("attributes") or {}).get(name) or {}
    return str(value.get("string") or "")


def _slices(run: _Run, rec: dict[str, Any]) -> None:
    def every_gpu() -> dict[str, dict[str, Any]] | None:
        devices = {str(d.get("name")): d for s in _node_slices(run) for d in (s.get("spec") or {}).get("devices") or []}
        uuids = {_attr(d, ATTR_UUID) for d in devices.values()}
        return devices if set(run.gpu_uuids) <= uuids else None

    devices = _wait("ResourceSlices naming every GPU the plugin found", every_gpu, 30.0)
    full = {n: d for n, d in devices.items() if _attr(d, ATTR_TYPE) == DEVICE_TYPE_GPU}
    first = next(n for n, d in sorted(full.items()) if _attr(d, ATTR_UUID) == run.gpu_uuids[0])
    run.device, run.device_uuid = first, run.gpu_uuids[0]
    rec.update(
        slices=len(_node_slices(run)),
        devices=len(devices),
        gpus=len(full),
        claim_device=first,
        claim_device_attributes=devices[first].get("attributes"),
    )


def _new_claim(run: _Run, name: str) -> tuple[str, str, str]:
    """An allocated claim for the run's device in the stand-in, reserved for the workload's pod."""
    assert run.server is not None
    node_term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [run.opts.node]}]}
    obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": run.opts.driver}}]}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [{"request": "gpu", "driver": run.opts.driver, "pool": run.opts.node, "device": run.device}],
                    "config": [],
                },
                "nodeSelector": {"nodeSelectorTerms": [node_term]},
            },
            "reservedFor": [{"resource": "pods", "name": POD, "uid": str(uuid.uuid4())}],
        },
    }
    stored = run.server.put(f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims", obj)
    return NAMESPACE, str(stored["metadata"]["uid"]), name


def _spec_path(run: _Run, claim_uid: str) -> Path:
    assert run.plugin is not None
    return run.plugin.cdi_root / spec_file_name(run.opts.driver, claim_uid)


def _prepare(run: _Run, rec: dict[str, Any]) -> None:
    assert run.kubelet is not None
    run.claim = _new_claim(run, "gpu-check")
    got = run.kubelet.prepare(*run.claim)
    rec.update(claim=f"{run.claim[0]}/{run.claim[2]}", uid=run.claim[1], call_ms=_ms(got.seconds))
    if got.error:
        raise StepFailed(f"NodePrepareResources answered an error: {got.error}")
    rec["devices"] = [{"pool": p, "device": d, "cdi_device_ids": list(ids)} for p, d, ids in got.devices]
    if [(p, d) for p, d, _ in got.devices] != [(run.opts.node, run.device)]:
        raise StepFailed(f"prepared {got.devices}, expected {run.device} of pool {run.opts.node}")
    path = _spec_path(run, run.claim[1])
    run.spec = json.loads(path.read_text())
    validate_spec(run.spec)
    edits = workload.spec_edits(run.spec)
    nodes = [{"path": p, "host": h, "exists": Path(h).exists()} for p, h in edits.device_nodes]
    rec.update(spec_file=str(path), spec=run.spec, device_nodes=nodes, mounts=[list(m) for m in edits.mounts])
    if edits.uuids != {run.device_uuid}:
        raise StepFailed(f"the spec names {sorted(edits.uuids)}, not the claim's GPU {run.device_uuid}")
    if not nodes or not all(n["exists"] for n in nodes):
        raise StepFailed(f"device nodes missing on this host: {[n['path'] for n in nodes if not n['exists']]}")


def _device_status(run: _Run, rec: dict[str, Any]) -> None:
    server = run.server
    assert server is not None

    def entry() -> dict[str, Any] | None:
        claim = server.get("resourceclaims", NAMESPACE, run.claim[2]) or {}
        for d in (claim.get("status") or {}).get("devices") or []:
            if d.get("device") == run.device and d.get("driver") == run.opts.driver:
                return dict(d)
        return None

    rec["entry"] = _wait("the claim's status.devices entry", entry, 15.0)


def _dev_probe(run: _Run, rec: dict[str, Any]) -> None:
    why = workload.can_namespace()
    if why is not None:
        raise StepSkipped(f"a private mount namespace needs root with unshare and mount: {why}")
    w = workload.start(
        run.spec, argv=[sys.executable, "-c", workload.DEV_PROBE], work_dir=run.opts.out / "run" / "dev-probe", mode="namespace"
    )
    got = w.finish(60.0)
    rec.update(got)
    listing = set(got.get("result", {}).get("dev") or [])
    want = {Path(p).relative_to("/dev").parts[0] for p, _ in workload.spec_edits(run.spec).device_nodes}
    others = {n for n in listing if n.startswith("nvidia")} - want
    rec["dev"] = sorted(listing)
    if got["exit_code"] != 0 or not want <= listing or others:
        raise StepFailed(f"/dev under the spec holds {sorted(listing)}; the spec's nodes are {sorted(want)}")


def _claim_row(run: _Run) -> ClaimDevice | None:
    try:
        view = parse(fetch(run.metrics_url))
    except ScrapeError:
        return None
    for d in view.devices:
        # By the claim's UID (the default labels), or its namespace and name (the tenant labels).
        ours = getattr(d, "claim_uid", "") == run.claim[1] or (d.namespace, d.claim) == (NAMESPACE, run.claim[2])
        if ours and d.device == run.device:
            return d
    return None


def _fake_usage(run: _Run, *args: str) -> None:
    assert run.plugin is not None
    state = str(run.plugin.plugin_dir / "fake-gpus")
    cmd = [run.opts.plugin_python, "-m", "dra_driver.sources.fake_usage", "--state-dir", state, *args]
    subprocess.run(cmd, cwd=REPO, check=True, capture_output=True, timeout=60)


def _workload(run: _Run, rec: dict[str, Any]) -> None:
    """The CUDA workload under the claim's spec, scraping the claim's row meanwhile (fake GPUs: the usage script's load)."""
    t0 = time.monotonic()
    if run.opts.fake_gpus:
        rec["load"] = "the fake GPUs' usage script: the claim's utilization set to 0.8 (python -m dra_driver.sources.fake_usage)"
        _fake_usage(run, "set", "--claim", run.claim[1], "--utilization", "0.8")

        def loaded() -> ClaimDevice | None:
            row = _claim_row(run)
            if row is not None and row.utilization is not None:
                run.busy.append((time.monotonic() - t0, row.utilization))
            return row if row is not None and row.utilization == 0.8 else None

        _wait("the claim's utilization at 0.8", loaded, 30.0, 0.25)
        raise StepSkipped("no CUDA on fake GPUs: the usage script stood in for the workload's load", by_design=True)
    work = run.opts.out / "run" / "workload"
    argv = workload.torch_argv(run.opts.workload_python, run.opts.workload_seconds, work)
    w = workload.start(run.spec, argv=argv, work_dir=work, mode=run.opts.workload_mode)
    while w.running() and time.monotonic() - t0 < run.opts.workload_seconds + 120:
        row = _claim_row(run)
        if row is not None and row.utilization is not None:
            run.busy.append((time.monotonic() - t0, row.utilization))
        time.sleep(0.25)
    result = w.finish(60.0)
    seen = [str(u) for u in result.get("result", {}).get("uuids") or []]
    rec.update(result, claim_gpu=run.device_uuid, gpus_seen=seen)
    print(f"gpu-check: the claim named GPU {run.device_uuid}; the workload saw {seen or 'no GPU'}", flush=True)
    if result["exit_code"] != 0 or not result.get("result", {}).get("ok"):
        raise StepFailed(f"the workload failed: {result.get('result', {}).get('error') or result['stderr_tail'][-800:]}")
    if len(seen) != 1 or not workload.same_gpu(run.device_uuid, seen[0]):
        raise StepFailed(f"the workload saw {seen}, not exactly the claim's GPU {run.device_uuid}")


def _metrics_busy(run: _Run, rec: dict[str, Any]) -> None:
    top = max((u for _, u in run.busy), default=None)
    first = next((t for t, u in run.busy if u >= BUSY_RATIO), None)
    rec.update(samples=len(run.busy), max_utilization=top, first_busy_after_s=None if first is None else round(first, 2))
    if top is None or top < BUSY_RATIO:
        raise StepFailed(f"the claim's utilization never reached {BUSY_RATIO} while loaded (max {top})")


def _metrics_idle(run: _Run, rec: dict[str, Any]) -> None:
    if run.opts.fake_gpus:
        _fake_usage(run, "idle", "--claim", run.claim[1])
    t0 = time.monotonic()

    def idle() -> ClaimDevice | None:
        row = _claim_row(run)
        return row if row is not None and row.idle_s > 0 else None

    row = _wait("the claim's idle clock", idle, 90.0, 0.25)
    rec.update(
        idle_started_after_s=round(time.monotonic() - t0, 2),
        idle_s=row.idle_s,
        utilization=row.utilization,
        pods=row.pods,  # pods: with tenant labels only
    )


def _unprepare(run: _Run, rec: dict[str, Any]) -> None:
    assert run.kubelet is not None
    error, seconds = run.kubelet.unprepare(*run.claim)
    rec["call_ms"] = _ms(seconds)
    if error:
        raise StepFailed(f"NodeUnprepareResources answered an error: {error}")
    path = _spec_path(run, run.claim[1])
    _wait("the claim's CDI spec removed", lambda: not path.exists(), 10.0)
    _wait("the claim's metrics row removed", lambda: _claim_row(run) is None, 30.0, 0.25)
    rec.update(spec_removed=True, metrics_row_removed=True)


def _prepare_latency(run: _Run, rec: dict[str, Any]) -> None:
    assert run.kubelet is not None
    n = run.opts.latency_claims
    if n <= 0:
        raise StepSkipped("--latency-claims 0")
    prep: list[float] = []
    unprep: list[float] = []
    for i in range(n):
        ref = _new_claim(run, f"gpu-check-latency-{i}")
        got = run.kubelet.prepare(*ref)
        if got.error:
            raise StepFailed(f"claim {i}: {got.error}")
        prep.append(got.seconds)
        error, spent = run.kubelet.unprepare(*ref)
        if error:
            raise StepFailed(f"claim {i}: {error}")
        unprep.append(spent)
    for name, values in (("prepare", prep), ("unprepare", unprep)):
        rec[name] = {
            "claims": n,
            "p50_ms": _ms(statistics.median(values)),
            "p99_ms": _ms(_pct(values, 99)),
            "max_ms": _ms(max(values)),
        }


def _plugin_stop(run: _Run, rec: dict[str, Any]) -> None:
    assert run.plugin is not None
    code = run.plugin.stop()
    paths = run.plugin.sockets
    left = sorted(p.name for p in run.plugin.cdi_root.iterdir()) if run.plugin.cdi_root.exists() else []
    rec.update(exit_code=code, sockets_left=[str(p) for p in (paths.registration, paths.dra) if p.exists()], cdi_left=left)
    if code != 0 or rec["sockets_left"] or left:
        raise StepFailed(f"exit code {code}, sockets left {rec['sockets_left']}, CDI files left {left}")


def api_summary(server: StandInApiServer) -> dict[str, Any]:
    """The stand-in's calls by method and resource (names as ``*``), the unauthorized ones and the errors."""
    by: Counter[str] = Counter()
    errors: list[str] = []
    for c in server.calls:
        t = parse_target(c.path)
        what = c.path
        if t is not None:
            what = f"{t.prefix}/{'namespaces/*/' if t.namespace else ''}{t.resource}{'/*' if t.name else ''}"
            what += f"/{t.sub}" if t.sub else ""
        by[f"{c.method} {what}"] += 1
        if not 200 <= c.status <= 299:
            errors.append(f"{c.method} {c.path} -> {c.status}")
    return {"calls": dict(sorted(by.items())), "unauthorized": sum(1 for c in server.calls if not c.authorized), "errors": errors}


def _api_calls(run: _Run, rec: dict[str, Any]) -> None:
    assert run.server is not None
    rec.update(api_summary(run.server))
    if rec["unauthorized"]:
        raise StepFailed(f"{rec['unauthorized']} calls came without the kubeconfig's token")


STEPS: tuple[tuple[str, Callable[[_Run, dict[str, Any]], None], bool], ...] = (
    # (name, step, critical: later steps need it)
    ("readonly-check", _script("gpu_readonly_check.py", ["{out}/readonly-check"]), False),
    ("nvml-health-check", _script("device_nvml_health_check.py", []), False),
    ("apiserver", _apiserver, True),
    ("plugin-start", _plugin_start, True),
    ("registration", _registration, True),
    ("slices", _slices, True),
    ("prepare", _prepare, True),
    ("device-status", _device_status, False),
    ("dev-probe", _dev_probe, False),
    ("workload", _workload, True),
    ("metrics-busy", _metrics_busy, False),
    ("metrics-idle", _metrics_idle, False),
    ("unprepare", _unprepare, True),
    ("prepare-latency", _prepare_latency, False),
    ("plugin-stop", _plugin_stop, True),
    ("api-calls", _api_calls, False),
)


def _plugin_log_summary(run: _Run) -> dict[str, Any]:
    if run.plugin is None:
        return {}
    logs = run.plugin.logs()
    bad = [e for e in logs if e.get("level") in ("warning", "error", "critical")]
    return {
        "file": str(run.plugin.log),
        "lines": len(logs),
        "warnings_and_errors": [{k: v for k, v in e.items() if k != "timestamp"} for e in bad[:30]],
    }


def run_flow(opts: Options) -> dict[str, Any]:
    """Every step; the report (``steps``, ``plugin_log``, ``result``: passed or failed)."""
    run = _Run(opts)
    opts.out.mkdir(parents=True, exist_ok=True)
    try:
        for name, fn, critical in STEPS:
            run.do(name, fn, critical=critical)
    finally:
        if run.plugin is not None:
            run.plugin.stop()
        if run.server is not None:
            run.server.stop()
        if run.state is not None:
            shutil.rmtree(run.state, ignore_errors=True)
    failed = [s["name"] for s in run.steps if s["status"] == "failed"]
    return {
        "mode": f"fake-gpus:{opts.fake_gpus}" if opts.fake_gpus else "gpu",
        "node": opts.node,
        "driver": opts.driver,
        "claim": {"namespace": run.claim[0], "uid": run.claim[1], "name": run.claim[2], "device": run.device},
        "claim_gpu_uuid": run.device_uuid,
        "steps": run.steps,
        "plugin_log": _plugin_log_summary(run),
        "result": "failed" if failed else "passed",
        "failed_steps": failed,
    }
