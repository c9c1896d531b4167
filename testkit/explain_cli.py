"""``dra-gpu explain`` run as users run it (a subprocess of the CLI with a kubeconfig), for the e2e tests.

Callers: the topology, version-matrix and live-explain tests. Returns the exit code and the parsed
``-o json`` document; an empty stdout fails with the CLI's stderr.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def explain_json(kubeconfig: Path, target: str, namespace: str, *extra: str) -> tuple[int, dict[str, Any]]:
    """``dra-gpu explain TARGET -n NAMESPACE -o json`` against the cluster of ``kubeconfig``."""
    argv = [sys.executable, "-m", "dra_driver.cli.main", "explain", target, "-n", namespace]
    argv += ["--kubeconfig", str(kubeconfig), "-o", "json", *extra]
    out = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=120, check=False)
    assert out.stdout.strip(), f"explain printed nothing (exit {out.returncode}): {out.stderr}"
    doc: dict[str, Any] = json.loads(out.stdout)
    return out.returncode, doc
