"""Inside a private mount namespace: a container's ``/dev`` and mounts from a CDI spec, then exec the workload.

Run by ``testkit.gpu_check.workload`` as ``unshare --mount --propagation private python -m
testkit.gpu_check.sandbox PLAN.json`` (root). Every mount made here lives in that namespace only
and ends with it; nothing on the host changes. In order: the host's ``/dev`` is bound at a
temporary directory, ``/dev`` becomes an empty tmpfs, the basic character devices (``null``,
``zero``, ``full``, ``random``, ``urandom``, ``tty``) and the plan's device nodes are bound into
it from the host's, ``/dev/shm`` is a fresh tmpfs, the temporary view of the host's ``/dev`` is
unmounted (so the workload cannot reach the other GPUs' nodes through it), the plan's mounts are
bound read-only onto container paths that exist (a missing one is listed, not created), what was
applied is written to the plan's ``applied`` file, and the workload replaces this process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

BASIC_DEVICES = ("null", "zero", "full", "random", "urandom", "tty")


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, text=True)


def _bind_file(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.touch()
    _mount("--bind", str(source), str(target))


def build(plan: dict[str, Any]) -> dict[str, Any]:
    """Make the namespace's ``/dev`` and mounts as the plan says; what was applied and what was not."""
    applied: dict[str, Any] = {"device_nodes": [], "missing_device_nodes": [], "mounts": [], "skipped_mounts": []}
    host_dev = Path(tempfile.mkdtemp(prefix="dra-gpu-hostdev-"))
    _mount("--bind", "/dev", str(host_dev))
    _mount("-t", "tmpfs", "-o", "mode=755,nosuid", "tmpfs", "/dev")

    def host(path: str) -> Path:
        p = Path(path)
        return host_dev / p.relative_to("/dev") if p.is_relative_to("/dev") else p

    for name in BASIC_DEVICES:
        if host(f"/dev/{name}").exists():
            _bind_file(host(f"/dev/{name}"), Path("/dev") / name)
    Path("/dev/shm").mkdir()
    _mount("-t", "tmpfs", "-o", "mode=1777,nosuid,nodev", "tmpfs", "/dev/shm")
    for path, host_path in plan["device_nodes"]:
        source = host(host_path)
        if not source.exists():
            applied["missing_device_nodes"].append(path)
            continue
        _bind_file(source, Path(path))
        applied["device_nodes"].append(path)
    subprocess.run(["umount", "-l", str(host_dev)], check=True, capture_output=True)
    host_dev.rmdir()
    for host_path, container_path in plan["mounts"]:
        target = Path(container_path)
        if not target.exists() or not Path(host_path).exists():
            why = "the container path does not exist on this host" if not target.exists() else "the host path does not exist"
            applied["skipped_mounts"].append({"host": host_path, "container": container_path, "why": why})
            continue
        _mount("--bind", host_path, container_path)
        _mount("-o", "remount,bind,ro", container_path)
        applied["mounts"].append({"host": host_path, "container": container_path, "options": "bind,ro"})
    applied["dev"] = sorted(str(p) for p in Path("/dev").rglob("*"))
    return applied


def main() -> int:
    """Build the namespace from the plan file named by the first argument, then exec the workload."""
    plan = json.loads(Path(sys.argv[1]).read_text())
    try:
        applied = build(plan)
    except (OSError, subprocess.CalledProcessError, ValueError) as err:
        detail = getattr(err, "stderr", "") or ""
        Path(plan["applied"]).write_text(json.dumps({"error": f"{type(err).__name__}: {err} {detail}".strip()}))
        print(json.dumps({"ok": False, "error": f"sandbox: {err} {detail}".strip()}), flush=True)
        return 1
    Path(plan["applied"]).write_text(json.dumps(applied, indent=1))
    argv = plan["argv"]
    os.execvpe(argv[0], argv, plan["env"])  # the workload the plan names, in place of this process
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
