"""The node under soak: the plugin's files and the simulator's state as the checks read them, and the plugin's lifecycle.

Base of ``bench.soak.run.Soak``; the callers, the chaos and the checks build on it.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from contextlib import suppress
from pathlib import Path

from bench.soak.model import NODE, PROFILE, Book, Claim, Gate, Options, Stats
from dra_driver.cli.main import inventory_slices
from dra_driver.core.checkpoint import CheckpointError, decode
from dra_driver.core.mig import MigInstance, MigStrategy
from dra_driver.mig_backends.sim import load_instances, load_modes
from testkit.claimdata import DRIVER
from testkit.cluster import LocalCluster
from testkit.plugin_process import PluginProcess


class SoakNode:
    """One plugin and one API server as the soak sees them: state readers and the plugin's lifecycle."""

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
