"""The callers: kubelet-like threads that create, prepare, hold and unprepare claims, and the ledger of told-prepared claims.

Mixed into ``bench.soak.run.Soak``.
"""

from __future__ import annotations

import random
import time
from typing import Any

import grpc

from bench.soak.checks import Checks
from bench.soak.model import NAMESPACE, NODE, Claim
from dra_driver.core.mig import MigInstance
from testkit.claimdata import DRIVER
from testkit.claims import create_allocated_claim
from testkit.cluster import ApiError


class Traffic(Checks):
    """Kubelet-like callers and the ledger."""

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
