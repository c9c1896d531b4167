"""``python -m bench.plots`` draws the perf pages' charts from the benches' JSON, deterministically.

Run as a process, as ``make bench`` runs it (tests never import bench: .importlinter).
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PEER = {
    "date": "2026-11-27",
    "peer": "test",
    "drivers": {
        "dra-gpu": {"prepare_ms": [4.0, 5.0, 6.0, 11.0], "unprepare_ms": [1.5, 2.0, 2.5]},
        "Go peer": {"prepare_ms": [5.0, 5.5, 7.0], "unprepare_ms": [2.5, 3.0, 7.0]},
    },
}
EXPLAIN = {
    "date": "2026-11-27",
    "results": [
        {"nodes": 500, "median_s": 2.07, "decode": 0.86, "validate": 0.40, "simulate": 0.48},
        {"nodes": 100, "median_s": 0.69, "decode": 0.16, "validate": 0.08, "simulate": 0.15},
    ],
}


def _plots(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench.plots", *args], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )


def _texts(svg: Path) -> str:
    root = ET.parse(svg).getroot()  # a well-formed SVG document
    assert root.tag.endswith("svg")
    return " ".join(t for el in root.iter() if el.tag.endswith("text") for t in el.itertext())


def test_plots_draw_both_charts_with_each_driver_and_size_named(tmp_path: Path) -> None:
    (tmp_path / "peer.json").write_text(json.dumps(PEER))
    (tmp_path / "explain.json").write_text(json.dumps(EXPLAIN))
    out = tmp_path / "img"
    got = _plots("--peer", str(tmp_path / "peer.json"), "--explain", str(tmp_path / "explain.json"), "--out", str(out))
    assert got.returncode == 0, got.stdout + got.stderr
    peer = _texts(out / "peer-latency.svg")
    assert "dra-gpu (3 calls)" in peer and "Go peer (3 calls)" in peer  # the unprepare panel's legend
    assert "NodePrepareResources" in peer and "NodeUnprepareResources" in peer
    explain = _texts(out / "explain-vs-nodes.svg")
    assert "100" in explain and "500" in explain and "decode" in explain


def test_plots_are_byte_identical_for_the_same_input(tmp_path: Path) -> None:
    (tmp_path / "explain.json").write_text(json.dumps(EXPLAIN))
    for out in ("a", "b"):
        assert _plots("--explain", str(tmp_path / "explain.json"), "--out", str(tmp_path / out)).returncode == 0
    assert (tmp_path / "a" / "explain-vs-nodes.svg").read_bytes() == (tmp_path / "b" / "explain-vs-nodes.svg").read_bytes()


def test_plots_refuse_a_driver_without_figures(tmp_path: Path) -> None:
    (tmp_path / "peer.json").write_text(json.dumps({"drivers": {"dra-gpu": {"prepare_ms": [], "unprepare_ms": [1.0]}}}))
    got = _plots("--peer", str(tmp_path / "peer.json"), "--out", str(tmp_path / "img"))
    assert got.returncode == 1
    assert "dra-gpu has no prepare_ms" in got.stdout
    assert not (tmp_path / "img" / "peer-latency.svg").exists()


def test_plots_fail_naming_a_missing_input(tmp_path: Path) -> None:
    got = _plots("--explain", str(tmp_path / "nope.json"), "--out", str(tmp_path))
    assert got.returncode == 1
    assert "nope.json does not exist" in got.stdout
