"""``python -m bench.mig_fragmentation`` on a small churn: the same arrivals for every order, counts that add up, seeded.

Run as a process (tests never import bench: .importlinter).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]


def _run(out: Path) -> dict[str, Any]:
    churn = ["--events", "80", "--warmup", "10", "--seeds", "7", "--load", "1.3", "--orders", "today", "index"]
    got = subprocess.run(
        [sys.executable, "-m", "bench.mig_fragmentation", *churn, "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert got.returncode == 0, got.stdout + got.stderr
    assert "| node-h100 | today |" in got.stdout and "| node-a100 | index |" in got.stdout
    body: dict[str, Any] = json.loads(out.read_text())
    return body


def test_every_order_sees_the_same_arrivals_and_counts_add_up(tmp_path: Path) -> None:
    body = _run(tmp_path / "a.json")
    rows = body["rows"]
    assert {(r["node"], r["order"]) for r in rows} == {(n, o) for n in ("node-h100", "node-a100") for o in ("today", "index")}
    for r in rows:
        assert r["arrivals"] == 70  # 80 arrivals, the first 10 not counted: the plan does not depend on the order
        assert 0 <= r["fragmented_one_gpu"] <= r["fragmented"] <= r["refused"] <= r["arrivals"]
        assert sum(a for a, _ in r["by_family"].values()) == r["arrivals"]
        assert sum(f for _, f in r["by_family"].values()) == r["refused"]
    assert any(r["refused"] > 0 for r in rows)  # 130 % offered load: some claims must be refused


def test_the_same_seed_gives_the_same_counts(tmp_path: Path) -> None:
    first = _run(tmp_path / "a.json")["rows"]
    second = _run(tmp_path / "b.json")["rows"]
    strip = [{k: v for k, v in r.items() if k != "seconds"} for r in first]
    assert strip == [{k: v for k, v in r.items() if k != "seconds"} for r in second]
