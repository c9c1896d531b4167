"""``bench.peer.report.floor_goals``: issue 32's plugin floor, judged from one run's figures.

Run in a process of its own (tests never import bench: .importlinter).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]


def floor_goals(ours: dict[str, Any], peer: dict[str, Any] | None) -> list[str]:
    code = (
        "import json, sys; from bench.peer.measure import Figures; from bench.peer.report import floor_goals; "
        "o, p = json.load(sys.stdin); "
        "print(json.dumps(floor_goals(Figures(**o), None if p is None else Figures(**p))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], input=json.dumps([ours, peer]), capture_output=True, text=True, check=True, cwd=REPO
    )
    lines: list[str] = json.loads(out.stdout)
    return lines


def test_the_rss_goal_is_relative_to_the_peer_of_the_same_run_and_the_start_goal_is_the_median() -> None:
    ours = {"socket_s": [0.2, 0.3, 0.24], "idle_rss_mib": [50.0, 49.0, 52.0]}
    assert floor_goals(ours, {"idle_rss_mib": [45.0, 46.0]}) == [
        "plugin floor (issue 32, 3 starts):",
        "  start -> DRA socket <= 0.25 s (median, quiet machine): 0.24: met",
        "  idle RSS <= 1.1x the peer's: 50 vs 45.5 (1.10x): met",
    ]
    assert floor_goals(ours, {"idle_rss_mib": [44.0]})[-1] == "  idle RSS <= 1.1x the peer's: 50 vs 44 (1.14x): NOT met"


def test_without_the_peer_only_the_start_goal_is_judged() -> None:
    assert floor_goals({"socket_s": [0.41]}, None) == [
        "plugin floor (issue 32, 1 starts):",
        "  start -> DRA socket <= 0.25 s (median, quiet machine): 0.41: NOT met",
    ]


def test_the_first_claim_prepared_is_shown_beside_the_socket_goal() -> None:
    lines = floor_goals({"socket_s": [0.2], "claim_s": [0.5, 0.45, 0.61]}, {"claim_s": [0.09]})
    assert (
        lines[2]
        == "  (start -> first claim prepared, the calls with claims having waited for recovery: 0.5 s; the peer's 0.09 s)"
    )
    assert floor_goals({"socket_s": [0.2], "claim_s": [0.4]}, None)[2].endswith("recovery: 0.4 s)")


def test_the_private_part_of_idle_memory_is_shown_beside_the_rss_goal() -> None:
    ours = {"socket_s": [0.3], "idle_rss_mib": [50.0], "idle_anon_mib": [20.0, 22.0, 21.0]}
    lines = floor_goals(ours, {"idle_rss_mib": [45.0], "idle_anon_mib": [10.5]})
    assert lines[-1].startswith("  (private part, RssAnon, which no page cache changes: 21 vs 10.5, 2.00x;")
