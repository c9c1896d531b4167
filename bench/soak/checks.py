"""The invariants: at a quiet moment, at the end, and the report with counts and violations.

Mixed into ``bench.soak.run.Soak``; the chaos thread runs a quiet check between its faults.
"""

from __future__ import annotations

import collections
import json

from bench.soak.model import CORRUPTIONS, KUBELET_DEADLINE_S, Claim
from bench.soak.node import SoakNode
from dra_driver.core.mig import MigInstance


class Checks(SoakNode):
    """Quiet-moment and end invariants, and the report."""

    # -- checks ---------------------------------------------------------------------------------

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
