"""The soak's bookkeeping: constants, the allocation book, claims, counts and violations, options.

Used by every part of ``bench.soak``. The book applies the scheduler's counter rule to what the
node publishes, so no two claims alive at the same time overlap.
"""

from __future__ import annotations

import collections
import random
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

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
