"""The chaos thread: SIGKILL and restart of the plugin (sometimes during its start), torn checkpoints, API server pauses.

Mixed into ``bench.soak.run.Soak``.
"""

from __future__ import annotations

import os
import random
import re
import signal
import threading
import time
from pathlib import Path

from bench.soak.checks import Checks
from bench.soak.model import CORRUPTIONS


class Chaos(Checks):
    """Faults at random moments, with a quiet check after each restart."""

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
