"""``bench.peer.report.floor_goals``: issue 32's plugin floor, judged from one run's figures."""

from __future__ import annotations

from bench.peer.measure import Figures
from bench.peer.report import floor_goals


def test_the_rss_goal_is_relative_to_the_peer_of_the_same_run_and_the_start_goal_is_the_median() -> None:
    ours = Figures(socket_s=[0.2, 0.3, 0.24], idle_rss_mib=[50.0, 49.0, 52.0])
    assert floor_goals(ours, Figures(idle_rss_mib=[45.0, 46.0])) == [
        "plugin floor (issue 32, 3 starts):",
        "  start -> DRA socket <= 0.25 s (median, quiet machine): 0.24: met",
        "  idle RSS <= 1.1x the peer's: 50 vs 45.5 (1.10x): met",
    ]
    assert floor_goals(ours, Figures(idle_rss_mib=[44.0]))[-1] == "  idle RSS <= 1.1x the peer's: 50 vs 44 (1.14x): NOT met"


def test_without_the_peer_only_the_start_goal_is_judged() -> None:
    lines = floor_goals(Figures(socket_s=[0.41]), None)
    assert lines == [
        "plugin floor (issue 32, 1 starts):",
        "  start -> DRA socket <= 0.25 s (median, quiet machine): 0.41: NOT met",
    ]
