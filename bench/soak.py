"""Soak with faults: the kubelet plugin under concurrent kubelet traffic, kill -9, API pauses, torn checkpoints.

Run by ``make soak`` (``python -m bench.soak`` from the repository root; ``--help`` for the knobs).
Not part of ``make test``: it runs for minutes and is meant to be read, like ``make bench``.

What runs: a real etcd + kube-apiserver (``e2e.cluster.LocalCluster``) with Node ``node-a``, and
the real ``dra-gpu-kubelet-plugin`` daemon (``e2e.plugin_process.PluginProcess``) on fake H100s
with dynamic MIG, so every MIG slice is carved in the MIG simulator's state file
(``<plugin dir>/fake-gpus/mig-state.json``), which outlives the plugin like a real GPU's state.

* **Callers** (``--concurrency`` threads) act as kubelets: each runs "pods" of one or two claims.
  A claim gets devices from an allocation book that applies the scheduler's rule to the
  counters the node publishes (``dra-gpu inventory --mig dynamic``), so no two claims alive at
  the same time overlap — full GPUs and MIG placements mixed. The claim is created in the API
  server with its allocation written through the status subresource, then prepared over the
  DRA v1 socket with the kubelet's 45 s deadline, held for a while, and unprepared. Like the
  kubelet, a caller retries a failed prepare (a transport error or the claim's own error)
  with backoff and gives up after ``--prepare-retry`` seconds (recorded); it retries an
  unprepare until it succeeds. A claim's devices go back to the book only when its unprepare
  succeeded.
* **Chaos** (one thread) at random moments: SIGKILLs the plugin and restarts it, sometimes
  killing the new process again while it starts; between the kill and the restart it may
  corrupt the checkpoint (``checkpoint.json`` truncated, bytes flipped, deleted, or both
  ``checkpoint.json`` and ``checkpoint.prev.json`` corrupted); SIGSTOPs the kube-apiserver for
  one to five seconds, then SIGCONT; and runs the quiet check below.
* **Ledger**: a claim whose prepare returned success is *told prepared* until its unprepare is
  sent. Right after a successful prepare its answer is checked (devices and CDI ids as
  allocated), its CDI spec must exist, and the UUIDs the spec hands out must be the allocated
  GPU or a live MIG instance at exactly the allocated placement, never one another live claim
  was given.
* **Quiet check** (new calls held back, in-flight calls drained, no chaos in progress): every
  told-prepared claim still has its CDI spec with the UUIDs it was told, each MIG instance
  exists at its placement, a whole GPU is not in MIG mode, and the checkpoint holds the claim;
  nothing is left behind by claims that are done (no MIG instance at a placement no active
  claim holds, no CDI spec or checkpoint entry of an inactive claim).
* **End**, after every caller unprepared its claims: no claim whose unprepare never succeeded,
  0 claim CDI specs, 0 MIG instances, no GPU left in MIG mode, 0 checkpoint entries.

Prints the counts and every invariant violation (deduplicated, with details); exits 1 when
there is one. A hard deadline (``--duration`` + ``--drain`` + slack) stops everything; every
process started here is killed on exit, on exceptions and on SIGINT/SIGTERM. The work dir
(plugin logs, checkpoints, simulator state, API server logs) is kept when something failed.
``--seed`` fixes each thread's choices; thread interleaving and timing still differ per run.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import grpc

from dra_driver.cli.main import inventory_slices
from dra_driver.core.checkpoint import CheckpointError, decode
from dra_driver.core.mig import MigInstance, MigStrategy
from dra_driver.sources.migsim import load_instances, load_modes
from e2e.cluster import ApiError, ClusterError, LocalCluster
from e2e.plugin_process import PluginProcess
from tests.claimdata import DRIVER
from tests.integration.claims import create_allocated_claim

NODE = "node-a"
PROFILE = "h100x8"
NAMESPACE = "default"
KUBELET_DEADLINE_S = 45  # what PluginProcess.prepare/unprepare pass: the kubelet's deadline
CORRUPTIONS = ("truncate", "flip", "delete", "both-generations")
Ref = tuple[str, str, str]  # (namespace, uid, name), as the kubelet names a claim

_UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_NAME_RE = re.compile(r"\bsoak-\d+(-\d+)?\b")
_TMP_RE = re.compile(r"/tmp/dra-gpu-soak-\w+")


def normalize(message: str) -> str:
    """An error message with UIDs, claim names and the work dir masked, for counting kinds of errors."""
    return _NAME_RE.sub("<claim>", _UUID_RE.sub("<uuid>", _TMP_RE.sub("<work>", message)))[:200]


# -- allocation book: the scheduler's counter rule over what the node publishes ------------------


@dataclass(frozen=True, slots=True)
class Device:
    """One published device: what it consumes, and what it stands for."""

    name: str
    gpu_uuid: str
    consumes: dict[str, dict[str, int]]  # counter set -> counter -> amount
    profile: str | None = None  # None: the full GPU
    start: int | None = None


class Book:
    """Devices handed to live claims; a claim gets devices only if every counter still fits."""

    def __init__(self, slices: list[dict[str, Any]]) -> None:
        self.free: dict[str, dict[str, int]] = {}
        self.devices: dict[str, Device] = {}
        for s in slices:
            spec = s["spec"]
            for cs in spec.get("sharedCounters", []):
                self.free[cs["name"]] = {k: int(v["value"]) for k, v in cs["counters"].items()}
            for d in spec.get("devices", []):
                attrs = d.get("attributes", {})
                consumes = {
                    c["counterSet"]: {k: int(v["value"]) for k, v in c["counters"].items()} for c in d.get("consumesCounters", [])
                }
                if attrs.get("type", {}).get("string") == "mig":
                    self.devices[d["name"]] = Device(
                        d["name"],
                        attrs["parentUUID"]["string"],
                        consumes,
                        attrs["profile"]["string"],
                        int(d["name"].rsplit("-", 1)[1]),
                    )
                else:
                    self.devices[d["name"]] = Device(d["name"], attrs["uuid"]["string"], consumes)
        self.full = sorted(n for n, d in self.devices.items() if d.profile is None)
        self.mig = sorted(n for n, d in self.devices.items() if d.profile is not None)
        self._lock = threading.Lock()

    def _fits(self, free: dict[str, dict[str, int]], dev: Device) -> bool:
        return all(free[cs].get(k, 0) >= v for cs, counters in dev.consumes.items() for k, v in counters.items())

    @staticmethod
    def _apply(free: dict[str, dict[str, int]], dev: Device, sign: int) -> None:
        for cs, counters in dev.consumes.items():
            for k, v in counters.items():
                free[cs][k] += sign * v

    def take(self, rng: random.Random, kinds: list[str]) -> list[str] | None:
        """Devices for one claim, one per kind ("full" or "mig"), or None when they do not fit now."""
        with self._lock:
            picked: list[Device] = []
            for kind in kinds:
                pool = self.full if kind == "full" else self.mig
                fitting = [self.devices[n] for n in pool if self._fits(self.free, self.devices[n])]
                if not fitting:
                    for dev in picked:
                        self._apply(self.free, dev, +1)
                    return None
                dev = rng.choice(fitting)
                self._apply(self.free, dev, -1)
                picked.append(dev)
            return [d.name for d in picked]

    def give_back(self, names: list[str]) -> None:
        with self._lock:
            for n in names:
                self._apply(self.free, self.devices[n], +1)


# -- counts, violations, ledger ---------------------------------------------------------------


@dataclass(slots=True)
class Claim:
    """A claim of the soak as the kubelet knows it."""

    ref: Ref
    devices: list[str]
    requests: list[str]
    active: bool = False  # a prepare was sent and no unprepare succeeded yet
    told: dict[str, str] | None = None  # device -> UUID the CDI spec handed out, while told prepared
    handed: dict[str, str] = field(default_factory=dict)  # the same, kept after unprepare

    @property
    def uid(self) -> str:
        return self.ref[1]


@dataclass(slots=True)
class Violation:
    kind: str
    detail: str
    at_s: float
    repeats: int = 1


@dataclass
class Stats:
    """Thread-safe counters, error-message histograms and violations."""

    counts: collections.Counter[str] = field(default_factory=collections.Counter)
    errors: dict[str, collections.Counter[str]] = field(default_factory=lambda: collections.defaultdict(collections.Counter))
    violations: dict[tuple[str, str], Violation] = field(default_factory=dict)
    t0: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def inc(self, key: str, n: int = 1) -> None:
        with self.lock:
            self.counts[key] += n

    def error(self, what: str, message: str) -> None:
        with self.lock:
            self.errors[what][normalize(message)] += 1

    def violation(self, kind: str, key: str, detail: str) -> None:
        with self.lock:
            v = self.violations.get((kind, key))
            if v is None:
                at = time.monotonic() - self.t0
                self.violations[(kind, key)] = Violation(kind, detail, at)
                print(f"[{at:7.1f}s] VIOLATION {kind}: {detail}", flush=True)
            else:
                v.repeats += 1


class Gate:
    """Lets calls through unless a quiet check holds it; the check waits for in-flight calls to end."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._closed = False
        self._inflight = 0

    @contextmanager
    def call(self) -> Iterator[None]:
        with self._cv:
            self._cv.wait_for(lambda: not self._closed)
            self._inflight += 1
        try:
            yield
        finally:
            with self._cv:
                self._inflight -= 1
                self._cv.notify_all()

    @contextmanager
    def quiet(self, timeout: float) -> Iterator[bool]:
        with self._cv:
            self._closed = True
            ok = self._cv.wait_for(lambda: self._inflight == 0, timeout)
        try:
            yield ok
        finally:
            with self._cv:
                self._closed = False
                self._cv.notify_all()


# -- the soak -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Options:
    duration: float
    claims: int
    concurrency: int
    seed: int
    chaos_interval: float
    corrupt_prob: float
    prepare_retry: float
    hold_max: float
    drain: float
    mig_latency: str
    gc_interval: float
    keep: bool

    def line(self) -> str:
        """The flags that repeat this run's choices (the seed fixes them; thread timing still varies)."""
        return (
            f"--duration {self.duration:g} --claims {self.claims} --concurrency {self.concurrency} --seed {self.seed} "
            f"--chaos-interval {self.chaos_interval:g} --corrupt-prob {self.corrupt_prob:g} "
            f"--prepare-retry {self.prepare_retry:g} --hold-max {self.hold_max:g} --drain {self.drain:g} "
            f"--mig-latency {self.mig_latency} --gc-interval {self.gc_interval:g}"
        )


class Soak:
    """Callers, chaos and checks against one plugin and one API server."""

    def __init__(self, opts: Options, workdir: Path) -> None:
        self.opts = opts
        self.workdir = workdir
        self.stats = Stats()
        self.gate = Gate()
        self.book = Book(inventory_slices(fake_gpus=PROFILE, node_name=NODE, driver=DRIVER, mig=MigStrategy.DYNAMIC))
        self.stop = threading.Event()
        self.ledger: dict[str, Claim] = {}
        self.held: dict[str, str] = {}  # UUID handed out -> uid of the told-prepared claim holding it
        self.unprepared: dict[str, str] = {}  # uid -> name of claims whose unprepare succeeded
        self.ledger_lock = threading.Lock()
        self.seq = 0
        self.seq_lock = threading.Lock()
        self.cluster: LocalCluster | None = None
        self.plugin: PluginProcess | None = None
        self.plugin_gen = 0
        self.t_stop = 0.0
        self.t_hard = 0.0
        self.final: dict[str, int] = {}

    # -- paths and state readers ----------------------------------------------------------------

    @property
    def p(self) -> PluginProcess:
        assert self.plugin is not None
        return self.plugin

    def spec_path(self, uid: str) -> Path:
        return self.p.cdi / f"k8s.{DRIVER}-claim_{uid}.json"

    def cdi_claim_uids(self) -> set[str]:
        prefix, suffix = f"k8s.{DRIVER}-claim_", ".json"
        names = [f.name for f in self.p.cdi.iterdir()] if self.p.cdi.exists() else []
        return {n[len(prefix) : -len(suffix)] for n in names if n.startswith(prefix) and n.endswith(suffix)}

    def spec_uuids(self, uid: str) -> dict[str, str] | None:
        """Device name -> UUID the claim's CDI spec hands out; None when there is no spec."""
        try:
            spec = json.loads(self.spec_path(uid).read_bytes())
        except FileNotFoundError:
            return None
        except ValueError as err:  # written atomically by the plugin: garbage is a finding, not a soak bug
            self.stats.violation("CDI spec unreadable", uid, f"claim {uid}: {err}")
            return {}
        out: dict[str, str] = {}
        for dev in spec.get("devices", []):
            name = str(dev.get("name", ""))
            device = name[len(uid) + 1 :] if name.startswith(uid + "-") else name
            for item in dev.get("containerEdits", {}).get("env", []):
                key, _, value = str(item).partition("=")
                if key.startswith("GPU_DEVICE_") and key.endswith("_UUID") and not key.endswith("_PARENT_UUID"):
                    out[device] = value
        return out

    def sim_instances(self) -> list[MigInstance]:
        if not self.p.sim_state.exists():
            return []
        return [i for insts in load_instances(self.p.sim_state).values() for i in insts]

    def sim_mig_mode(self) -> dict[str, bool]:
        modes = load_modes(self.p.sim_state) if self.p.sim_state.exists() else {}
        return {u: m.current for u, m in modes.items()}

    def checkpoint_claims(self) -> dict[str, str] | None:
        """uid -> state (+ " recovered") of checkpoint.json; {} when absent, None when unreadable."""
        path = self.p.plugin_dir / "checkpoint.json"
        try:
            cp = decode(path.read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, CheckpointError):
            return None
        return {u: e.state.value + (" recovered" if e.recovered else "") for u, e in cp.claims.items()}

    # -- plugin lifecycle -----------------------------------------------------------------------

    def new_log(self) -> None:
        """Each plugin process logs to its own file (PluginProcess.start scans the whole log)."""
        self.plugin_gen += 1
        self.p.log = self.workdir / f"plugin-{self.plugin_gen:03d}.log"

    def start_plugin(self) -> None:
        """Start the plugin, retrying a failed start (a violation: the plugin must always come up)."""
        for attempt in range(4):
            self.new_log()
            try:
                self.p.start(timeout=60)
                return
            except RuntimeError as err:
                self.kill_plugin_quietly()
                self.stats.violation(
                    "plugin did not start",
                    f"gen{self.plugin_gen}",
                    f"start #{attempt + 1} failed ({self.p.log.name}): {str(err).splitlines()[0][:300]}",
                )
        self.stop.set()
        raise RuntimeError("the plugin failed to start four times in a row; see the violations")

    def kill_plugin_quietly(self) -> None:
        proc = self.plugin.proc if self.plugin is not None else None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def check_plugin_alive(self) -> None:
        proc = self.p.proc
        if proc is not None and proc.poll() is not None:
            self.stats.violation(
                "plugin exited by itself",
                f"gen{self.plugin_gen}",
                f"plugin process exited with {proc.returncode} without being killed ({self.p.log.name})",
            )
            self.start_plugin()

    # -- callers (kubelets) -----------------------------------------------------------------------

    def next_name(self) -> str:
        with self.seq_lock:
            self.seq += 1
            return f"soak-{self.seq}"

    def claims_left(self) -> bool:
        with self.seq_lock:
            return self.opts.claims <= 0 or self.seq < self.opts.claims

    def caller(self, index: int) -> None:
        rng = random.Random(self.opts.seed * 1_000_003 + index)
        try:
            while not self.stop.is_set() and self.claims_left():
                self.pod(rng)
        except Exception as err:
            self.stats.violation("soak bug", f"caller{index}", f"caller {index} crashed: {type(err).__name__}: {err}")
            raise

    def pick_kinds(self, rng: random.Random) -> list[str]:
        r = rng.random()
        if r < 0.30:
            return ["full"]
        if r < 0.85:
            return ["mig"]
        return rng.choice([["mig", "mig"], ["mig", "full"], ["full", "full"]])

    def new_claim(self, rng: random.Random) -> Claim | None:
        """Devices from the book, then the allocated claim in the API server; None when stopping."""
        while True:
            if self.stop.is_set():
                return None
            devices = self.book.take(rng, self.pick_kinds(rng))
            if devices is not None:
                break
            self.stats.inc("book full (waited)")
            time.sleep(rng.uniform(0.05, 0.2))
        requests = [f"r{i}" for i in range(len(devices))]
        name = self.next_name()
        assert self.cluster is not None
        for attempt in range(20):
            try:
                ref = create_allocated_claim(
                    self.cluster, name=f"{name}-{attempt}", namespace=NAMESPACE, devices=devices, requests=requests, node=NODE
                )
                self.stats.inc("claims created")
                return Claim(ref, devices, requests)
            except (ApiError, OSError) as err:  # the API server is paused: a timeout; try another name
                self.stats.inc("claim create retried")
                self.stats.error("create claim", str(err))
                if self.stop.is_set():
                    break
                time.sleep(0.5)
        self.book.give_back(devices)
        return None

    def pod(self, rng: random.Random) -> None:
        claims: list[Claim] = []
        for _ in range(1 if rng.random() < 0.8 else 2):
            c = self.new_claim(rng)
            if c is not None:
                claims.append(c)
        if not claims:
            return
        self.prepare_all(claims, rng)
        if not self.stop.is_set():
            self.stop.wait(rng.uniform(0, self.opts.hold_max))
        self.unprepare_all([c for c in claims if c.active], rng)
        for c in claims:
            if not c.active:  # never sent, or unprepared: the device is free again
                self.book.give_back(c.devices)
            try:
                assert self.cluster is not None
                self.cluster.api("DELETE", f"/apis/resource.k8s.io/v1/namespaces/{c.ref[0]}/resourceclaims/{c.ref[2]}")
            except (ApiError, OSError):
                self.stats.inc("claim delete failed (ignored)")

    def prepare_all(self, claims: list[Claim], rng: random.Random) -> None:
        pending = list(claims)
        give_up = time.monotonic() + self.opts.prepare_retry
        backoff = 0.2
        last: dict[str, str] = {}
        while pending:
            failed: list[Claim] = []
            with self.gate.call():
                with self.ledger_lock:
                    for c in pending:
                        c.active = True
                        self.ledger[c.uid] = c
                self.stats.inc("prepare calls")
                try:
                    resp = self.p.prepare([c.ref for c in pending])
                except grpc.RpcError as err:
                    msg = f"{err.code().name}: {err.details()}"
                    self.stats.inc("prepare calls failed (transport)")
                    self.stats.error("prepare (transport)", msg)
                    failed = pending
                    last = {c.uid: msg for c in pending}
                else:
                    for c in pending:
                        r = resp.claims.get(c.uid)
                        if r is None:
                            self.stats.violation("prepare answer missing a claim", c.uid, f"no answer for claim {c.ref}")
                            failed.append(c)
                        elif r.error:
                            self.stats.inc("prepare claim errors")
                            self.stats.error("prepare (claim error)", r.error)
                            last[c.uid] = r.error
                            failed.append(c)
                        else:
                            self.stats.inc("prepare claims ok")
                            self.told(c, r)
            pending = failed
            if not pending:
                return
            if self.stop.is_set():
                self.stats.inc("prepare abandoned at end of run", len(pending))
                return
            if time.monotonic() > give_up:
                for c in pending:
                    self.stats.inc("prepare gave up")
                    self.stats.error("prepare gave up (last error)", last.get(c.uid, "?"))
                return
            time.sleep(rng.uniform(0.5, 1.0) * backoff)
            backoff = min(backoff * 2, 3.2)

    def told(self, c: Claim, r: Any) -> None:
        """The kubelet was told ``c`` is prepared: check the answer and what it stands for, then record it."""
        got = sorted((d.device_name, d.pool_name, tuple(d.request_names), tuple(d.cdi_device_ids)) for d in r.devices)
        want = sorted(
            (dev, NODE, (req,), (f"k8s.{DRIVER}/claim={c.uid}-{dev}",)) for dev, req in zip(c.devices, c.requests, strict=True)
        )
        if got != want:
            self.stats.violation("wrong prepare answer", c.uid, f"claim {c.ref[2]}: answered {got}, allocated {want}")
        uuids = self.spec_uuids(c.uid)
        if uuids is None:
            self.stats.violation(
                "told-prepared claim without CDI spec", c.uid, f"claim {c.ref[2]}: no CDI spec right after prepare"
            )
            uuids = {}
        insts = {i.uuid: i for i in self.sim_instances() if i.uuid}
        for dev in c.devices:
            u = uuids.get(dev)
            if u is None:
                self.stats.violation("CDI spec lacks a device", c.uid, f"claim {c.ref[2]}: spec names no UUID for {dev}")
                continue
            self.check_device(c, dev, u, insts, "right after prepare")
        with self.ledger_lock:
            for dev, u in uuids.items():
                other = self.held.get(u)
                if other is not None and other != c.uid:
                    self.stats.violation(
                        "device given to two live claims",
                        u,
                        f"{u} ({dev}) handed to claim {c.ref[2]} while claim {other} holds it",
                    )
                self.held[u] = c.uid
            c.told = uuids
            c.handed = dict(uuids)

    def check_device(self, c: Claim, dev: str, u: str, insts: dict[str, MigInstance], when: str) -> None:
        d = self.book.devices[dev]
        if d.profile is None:
            if u != d.gpu_uuid:
                self.stats.violation(
                    "wrong device UUID", f"{c.uid}/{dev}", f"claim {c.ref[2]} {dev}: {u}, not {d.gpu_uuid} ({when})"
                )
            return
        inst = insts.get(u)
        if inst is None:
            self.stats.violation(
                "told-prepared MIG instance missing",
                f"{c.uid}/{dev}",
                f"claim {c.ref[2]} {dev}: MIG device {u} does not exist ({when})",
            )
        elif (inst.parent_uuid, inst.profile_name, inst.placement.start) != (d.gpu_uuid, d.profile, d.start):
            self.stats.violation(
                "MIG instance at the wrong placement",
                f"{c.uid}/{dev}",
                f"claim {c.ref[2]} {dev}: {u} is {inst.profile_name}@{inst.placement.start} on {inst.parent_uuid} ({when})",
            )

    def unprepare_all(self, claims: list[Claim], rng: random.Random) -> None:
        if not claims:
            return
        with self.ledger_lock:  # from here on the kubelet no longer counts on the claims' devices
            for c in claims:
                for u in (c.told or {}).values():
                    if self.held.get(u) == c.uid:
                        del self.held[u]
                c.told = None
        pending = list(claims)
        backoff = 0.2
        while pending:
            failed: list[Claim] = []
            with self.gate.call():
                self.stats.inc("unprepare calls")
                try:
                    resp = self.p.unprepare([c.ref for c in pending])
                except grpc.RpcError as err:
                    self.stats.inc("unprepare calls failed (transport)")
                    self.stats.error("unprepare (transport)", f"{err.code().name}: {err.details()}")
                    failed = pending
                else:
                    done: list[Claim] = []
                    for c in pending:
                        r = resp.claims.get(c.uid)
                        if r is not None and not r.error:
                            self.stats.inc("unprepare claims ok")
                            with self.ledger_lock:
                                c.active = False
                                self.ledger.pop(c.uid, None)
                                self.unprepared[c.uid] = c.ref[2]
                            done.append(c)
                            continue
                        self.stats.inc("unprepare claim errors")
                        self.stats.error("unprepare (claim error)", r.error if r is not None else "no answer for the claim")
                        failed.append(c)
                    self.after_unprepare(done)
            pending = failed
            if pending and time.monotonic() > self.t_hard:
                for c in pending:
                    self.stats.violation(
                        "unprepare never succeeded",
                        c.uid,
                        f"claim {c.ref[2]} ({', '.join(c.devices)}) still failing at the deadline",
                    )
                return
            if pending:
                time.sleep(rng.uniform(0.5, 1.0) * backoff)
                backoff = min(backoff * 2, 3.2)

    def after_unprepare(self, claims: list[Claim]) -> None:
        """Unprepare said success: the claims' CDI specs and MIG instances must be gone now.

        No other live claim can hold their placements yet (the book gets them back later), so
        an instance at one of them is what this unprepare left behind.
        """
        if not claims:
            return
        at: dict[tuple[str, str | None, int | None], MigInstance] = {
            (i.parent_uuid, i.profile_name, i.placement.start): i for i in self.sim_instances()
        }
        for c in claims:
            if self.spec_path(c.uid).exists():
                self.stats.violation("unprepare succeeded but left its CDI spec", c.uid, f"claim {c.ref[2]}")
            for dev in c.devices:
                d = self.book.devices[dev]
                inst = at.get((d.gpu_uuid, d.profile, d.start)) if d.profile is not None else None
                if inst is not None:
                    told = c.handed.get(dev)
                    whose = "the instance it was told" if told == inst.uuid else f"told {told}" if told else "never told prepared"
                    self.stats.violation(
                        "unprepare succeeded but left its MIG instance",
                        f"{c.uid}/{dev}",
                        f"claim {c.ref[2]} {dev}: {inst.uuid} gi{inst.gi_id} still exists ({whose})",
                    )

    # -- chaos ----------------------------------------------------------------------------------

    def chaos(self) -> None:
        rng = random.Random(self.opts.seed * 7919 + 1)
        try:
            while not self.stop.wait(rng.expovariate(1 / self.opts.chaos_interval)):
                self.check_plugin_alive()
                action = rng.choices(["kill", "pause", "check"], weights=[0.45, 0.3, 0.25])[0]
                if action == "kill":
                    self.kill_and_restart(rng)
                elif action == "pause":
                    self.pause_api(rng.uniform(1.0, 5.0))
                else:
                    self.quiet_check("quiet moment")
        except Exception as err:
            self.stats.violation("soak bug", "chaos", f"chaos thread crashed: {type(err).__name__}: {err}")
            self.stop.set()
            raise

    def kill_and_restart(self, rng: random.Random) -> None:
        self.p.kill9()
        self.stats.inc("plugin SIGKILLs")
        self.maybe_corrupt(rng)
        if rng.random() < 0.2:  # kill the next one while it starts (recovery in progress)
            self.kill_during_start(rng.uniform(0.0, 1.5))
            self.maybe_corrupt(rng)
        self.start_plugin()
        self.stats.inc("plugin restarts")
        self.quiet_check("just after a restart")  # what recovery kept, before traffic changes it

    def kill_during_start(self, delay: float) -> None:
        old = self.p.proc
        self.new_log()
        errors: list[str] = []

        def start() -> None:
            try:
                self.p.start(timeout=60)
            except RuntimeError as err:
                errors.append(str(err))

        t = threading.Thread(target=start, name="start-to-kill", daemon=True)
        t.start()
        deadline = time.monotonic() + 10
        while self.p.proc is old and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(delay)
        self.kill_plugin_quietly()
        t.join(70)
        self.stats.inc("plugin SIGKILLs during start-up" if errors else "plugin SIGKILLs just after start-up")

    def maybe_corrupt(self, rng: random.Random) -> None:
        if rng.random() >= self.opts.corrupt_prob:
            return
        kind = rng.choice(CORRUPTIONS)
        cur = self.p.plugin_dir / "checkpoint.json"
        prev = self.p.plugin_dir / "checkpoint.prev.json"
        if kind == "delete":
            done = self.delete(cur)
        elif kind == "both-generations":
            done = self.damage(cur, rng, rng.choice(["truncate", "flip"]))
            done = self.damage(prev, rng, rng.choice(["truncate", "flip"])) and done
        else:
            done = self.damage(cur, rng, kind)
        self.stats.inc(f"checkpoint corruptions: {kind}" if done else f"checkpoint corruptions skipped (no file): {kind}")

    @staticmethod
    def delete(path: Path) -> bool:
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        return True

    @staticmethod
    def damage(path: Path, rng: random.Random, how: str) -> bool:
        """Truncate the file or flip bytes in it (never inside the apiVersion value: a changed
        version reads as a checkpoint from a newer dra-gpu, which the plugin refuses on purpose)."""
        try:
            data = bytearray(path.read_bytes())
        except FileNotFoundError:
            return False
        if how == "truncate" or len(data) < 2:
            del data[rng.randrange(len(data)) if data else 0 :]
        else:
            m = re.search(rb'"apiVersion":\s*"[^"]*"', data)
            protected = range(m.start(), m.end()) if m else range(0)
            for _ in range(rng.randint(1, 8)):
                i = rng.randrange(len(data))
                if i not in protected:
                    data[i] ^= rng.randint(1, 255)
        path.write_bytes(bytes(data))
        return True

    def pause_api(self, seconds: float) -> None:
        assert self.cluster is not None
        pid = self.cluster.pids["kube-apiserver"]
        os.kill(pid, signal.SIGSTOP)
        self.stats.inc("API server pauses")
        try:
            self.stop.wait(seconds)
        finally:
            os.kill(pid, signal.SIGCONT)
        self.stats.inc("API server paused (ms)", int(seconds * 1000))

    # -- checks ---------------------------------------------------------------------------------

    def quiet_check(self, where: str) -> None:
        with self.gate.quiet(timeout=KUBELET_DEADLINE_S + 15) as ok:
            if not ok:
                self.stats.inc("quiet checks skipped (calls did not drain)")
                return
            self.stats.inc("quiet checks")
            with self.ledger_lock:
                active = {u: c for u, c in self.ledger.items() if c.active}
            try:
                instances = self.sim_instances()
                modes = self.sim_mig_mode()
            except (OSError, ValueError) as err:
                self.stats.violation("MIG simulator state unreadable", where, str(err))
                return
            insts = {i.uuid: i for i in instances if i.uuid}
            ckpt = self.checkpoint_claims()
            if ckpt is None:
                self.stats.violation("checkpoint unreadable while the plugin is up and idle", where, f"at {where}")
                ckpt = {}
            for uid, c in active.items():
                if c.told is None:
                    continue
                now = self.spec_uuids(uid)
                if now is None:
                    self.stats.violation(
                        "told-prepared claim without CDI spec", uid, f"claim {c.ref[2]}: CDI spec gone ({where})"
                    )
                elif now != c.told:
                    self.stats.violation(
                        "told-prepared CDI spec changed",
                        uid,
                        f"claim {c.ref[2]}: spec now hands out {now}, told {c.told} ({where})",
                    )
                for dev, u in c.told.items():
                    self.check_device(c, dev, u, insts, where)
                    d = self.book.devices[dev]
                    if d.profile is None and (modes.get(d.gpu_uuid) or any(i.parent_uuid == d.gpu_uuid for i in instances)):
                        self.stats.violation(
                            "whole GPU of a told-prepared claim in MIG mode", f"{uid}/{dev}", f"claim {c.ref[2]} {dev} ({where})"
                        )
                if uid not in ckpt:
                    self.stats.violation(
                        "told-prepared claim missing from the checkpoint",
                        uid,
                        f"claim {c.ref[2]} not in checkpoint.json ({where})",
                    )
            places = {
                (self.book.devices[dev].gpu_uuid, self.book.devices[dev].profile, self.book.devices[dev].start)
                for c in active.values()
                for dev in c.devices
            }
            for i in instances:
                if (i.parent_uuid, i.profile_name, i.placement.start) not in places:
                    self.stats.violation(
                        "leaked MIG instance",
                        f"{i.parent_uuid}/{i.profile_name}@{i.placement.start}/{i.uuid}",
                        f"{i.profile_name}@{i.placement.start} gi{i.gi_id} ({i.uuid}) on {i.parent_uuid}: no active claim holds "
                        f"this placement ({where})",
                    )
            for uid in self.cdi_claim_uids() - set(active):
                self.stats.violation("leaked CDI spec", uid, f"CDI spec of claim {self.describe(uid)} ({where})")
            for uid, state in ckpt.items():
                if uid not in active:
                    self.stats.violation(
                        "leaked checkpoint entry", uid, f"{state} entry for claim {self.describe(uid)} ({where})"
                    )

    def describe(self, uid: str) -> str:
        with self.ledger_lock:
            name = self.unprepared.get(uid)
        return f"{name} ({uid}), unprepared successfully before" if name else f"{uid}, never prepared by the soak"

    def final_check(self) -> None:
        with self.ledger_lock:
            stuck = [c for c in self.ledger.values() if c.active]
        for c in stuck:
            self.stats.violation(
                "unprepare never succeeded", c.uid, f"claim {c.ref[2]} ({', '.join(c.devices)}) still active at the end"
            )
        self.quiet_check("end of run")
        instances = self.sim_instances()
        modes = self.sim_mig_mode()
        ckpt = self.checkpoint_claims() or {}
        specs = self.cdi_claim_uids()
        self.final = {
            "MIG instances left": len(instances),
            "GPUs left in MIG mode": sum(modes.values()),
            "claim CDI specs left": len(specs),
            "checkpoint entries left": len(ckpt),
        }
        for what, n in self.final.items():
            if n:
                self.stats.violation("left at the end", what, f"{what}: {n}")

    # -- run ------------------------------------------------------------------------------------

    def run(self) -> None:
        opts = self.opts
        print(f"starting etcd + kube-apiserver (work dir {self.workdir})", flush=True)
        with LocalCluster(log_dir=self.workdir / "k8s-logs") as cluster:
            self.cluster = cluster
            cluster.add_node(NODE)
            self.plugin = PluginProcess(
                self.workdir / "node",
                kubeconfig=cluster.kubeconfig,
                node=NODE,
                profile=PROFILE,
                extra_args=("--mig", "dynamic", "--fake-mig-latency", opts.mig_latency, "--gc-interval", str(opts.gc_interval)),
            )
            try:
                self.start_plugin()
                self.stats.t0 = time.monotonic()
                self.t_stop = self.stats.t0 + opts.duration
                self.t_hard = self.t_stop + opts.drain
                print(
                    f"soak: {opts.duration:.0f}s, {opts.concurrency} callers, seed {opts.seed}, "
                    f"{len(self.book.full)} GPUs + {len(self.book.mig)} MIG placements",
                    flush=True,
                )
                callers = [
                    threading.Thread(target=self.caller, args=(i,), name=f"kubelet-{i}", daemon=True)
                    for i in range(opts.concurrency)
                ]
                chaos = threading.Thread(target=self.chaos, name="chaos", daemon=True)
                for t in [*callers, chaos]:
                    t.start()
                while time.monotonic() < self.t_stop and not self.stop.is_set() and any(t.is_alive() for t in callers):
                    time.sleep(0.5)
                self.stop.set()
                chaos.join(120)
                for t in callers:
                    t.join(max(1.0, self.t_hard + 2 * KUBELET_DEADLINE_S - time.monotonic()))
                self.stats.counts["duration (s)"] = int(time.monotonic() - self.stats.t0)
                if chaos.is_alive() or any(t.is_alive() for t in callers):
                    self.stats.violation("soak bug", "threads", "threads still running after the drain deadline")
                else:
                    self.check_plugin_alive()
                    self.final_check()
            finally:
                self.stop.set()
                self.resume_api()
                self.plugin.stop()

    def resume_api(self) -> None:
        if self.cluster is not None:
            pid = self.cluster.pids.get("kube-apiserver")
            if pid is not None:
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)

    def emergency_kill(self) -> None:
        """Kill every process started here now (hard deadline, signals)."""
        self.resume_api()
        self.kill_plugin_quietly()
        if self.cluster is not None:
            for pid in self.cluster.pids.values():
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def notices(self) -> collections.Counter[str]:
        """The plugin's checkpoint notices (log lines that are also Node Events), by reason."""
        out: collections.Counter[str] = collections.Counter()
        for log in sorted(self.workdir.glob("plugin-*.log")):
            for line in log.read_text(errors="replace").splitlines():
                if '"checkpoint_notice"' in line:
                    try:
                        out[json.loads(line).get("reason", "?")] += 1
                    except ValueError:
                        continue
        return out

    def report(self) -> int:
        s = self.stats
        c = s.counts
        print("\n== soak counts")
        rows = [
            ("duration", f"{c['duration (s)']} s"),
            ("claims created", c["claims created"]),
            (
                "prepares",
                f"{c['prepare claims ok']} ok, {c['prepare claim errors']} claim errors, "
                f"{c['prepare calls failed (transport)']} failed calls of {c['prepare calls']}",
            ),
            (
                "unprepares",
                f"{c['unprepare claims ok']} ok, {c['unprepare claim errors']} claim errors, "
                f"{c['unprepare calls failed (transport)']} failed calls of {c['unprepare calls']}",
            ),
            ("prepare gave up", c["prepare gave up"]),
            ("prepare abandoned at end", c["prepare abandoned at end of run"]),
            (
                "plugin kills",
                f"{c['plugin SIGKILLs']} (plus {c['plugin SIGKILLs during start-up']} during start-up, "
                f"{c['plugin SIGKILLs just after start-up']} just after), {c['plugin restarts']} restarts",
            ),
            ("API server pauses", f"{c['API server pauses']} ({c['API server paused (ms)'] / 1000:.1f} s stopped)"),
            ("checkpoint corruptions", ", ".join(f"{k}: {c[f'checkpoint corruptions: {k}']}" for k in CORRUPTIONS)),
            ("quiet checks", f"{c['quiet checks']} (+ end), {c['quiet checks skipped (calls did not drain)']} skipped"),
            ("book full (caller waited)", c["book full (waited)"]),
            ("claim creates retried", c["claim create retried"]),
            ("reproduce (same choices)", f"python -m bench.soak {self.opts.line()}"),
        ]
        for k, v in rows:
            print(f"  {k:<28} {v}")
        skipped = {k: v for k, v in c.items() if k.startswith("checkpoint corruptions skipped")}
        if skipped:
            print(f"  {'corruptions skipped':<28} {skipped}")
        print(f"  {'plugin notices (Events)':<28} {dict(self.notices())}")
        for k, v in self.final.items():
            print(f"  {k:<28} {v}")
        for what, hist in sorted(s.errors.items()):
            print(f"\n  errors, {what} (top 8 of {sum(hist.values())}):")
            for msg, n in hist.most_common(8):
                print(f"    {n:6d}  {msg}")
        kinds = collections.Counter(v.kind for v in s.violations.values())
        print(f"\n== invariant violations: {sum(kinds.values())} distinct")
        for kind, n in kinds.most_common():
            print(f"  {n:5d}  {kind}")
            for v in [v for v in s.violations.values() if v.kind == kind][:6]:
                again = f" (x{v.repeats})" if v.repeats > 1 else ""
                print(f"         [{v.at_s:6.1f}s] {v.detail}{again}")
        return 1 if s.violations else 0


def parse(argv: list[str] | None = None) -> Options:
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--duration", type=float, default=180.0, help="seconds of traffic and chaos (default 180)")
    p.add_argument("--claims", type=int, default=20000, help="at most this many claims (0: no limit; default 20000)")
    p.add_argument("--concurrency", type=int, default=16, help="concurrent kubelet callers (default 16)")
    p.add_argument("--seed", type=int, default=1, help="seed of every thread's choices (default 1)")
    p.add_argument("--chaos-interval", type=float, default=4.0, help="mean seconds between chaos actions (default 4)")
    p.add_argument("--corrupt-prob", type=float, default=0.5, help="chance a kill also corrupts the checkpoint (default 0.5)")
    p.add_argument("--prepare-retry", type=float, default=60.0, help="seconds a caller retries one prepare (default 60)")
    p.add_argument("--hold-max", type=float, default=0.5, help="longest a claim stays prepared, seconds (default 0.5)")
    p.add_argument("--drain", type=float, default=60.0, help="seconds after --duration for unprepares to succeed (default 60)")
    p.add_argument("--mig-latency", choices=["zero", "realistic"], default="zero", help="MIG simulator latency (default zero)")
    p.add_argument(
        "--gc-interval",
        type=float,
        default=0.0,
        help="the plugin's pass over claims whose ResourceClaim is gone, seconds (default 0: off, so leaks stay visible)",
    )
    p.add_argument("--keep", action="store_true", help="keep the work dir even when nothing failed")
    a = p.parse_args(argv)
    return Options(
        a.duration,
        a.claims,
        a.concurrency,
        a.seed,
        a.chaos_interval,
        a.corrupt_prob,
        a.prepare_retry,
        a.hold_max,
        a.drain,
        a.mig_latency,
        a.gc_interval,
        a.keep,
    )


def main(argv: list[str] | None = None) -> int:
    opts = parse(argv)
    workdir = Path(tempfile.mkdtemp(prefix="dra-gpu-soak-"))
    soak = Soak(opts, workdir)
    hard_s = 120 + opts.duration + opts.drain + 3 * KUBELET_DEADLINE_S  # start-up, run, drain, last calls

    def watchdog() -> None:
        time.sleep(hard_s)
        print(f"soak: hard deadline ({hard_s:.0f}s) passed: killing everything", file=sys.stderr, flush=True)
        soak.emergency_kill()
        soak.report()
        print(f"work dir kept: {workdir}", file=sys.stderr, flush=True)
        os._exit(3)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    threading.Thread(target=watchdog, name="watchdog", daemon=True).start()
    rc = 2
    try:
        soak.run()
        rc = soak.report()
    except (KeyboardInterrupt, ClusterError, RuntimeError) as err:
        print(f"soak aborted: {type(err).__name__}: {err}", file=sys.stderr)
        soak.report()
    finally:
        soak.emergency_kill()  # no-op when everything stopped cleanly
    if rc == 0 and not opts.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(f"work dir kept (plugin logs plugin-*.log, node/, k8s-logs/): {workdir}")
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
