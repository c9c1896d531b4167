"""bench.cluster_scale: the recommended dynamic-MIG layout publishes what the plugin would with
``--mig-profiles``, and the table sets the scheduler's CPU per pod against full GPUs'."""

from __future__ import annotations

from bench.cluster_scale.fleet import LAYOUTS, publication
from bench.cluster_scale.report import Scenario, table
from bench.cluster_scale.workload import claim_template


def test_recommended_layout_publishes_three_profiles_every_placement() -> None:
    assert LAYOUTS["mig-rec"][1] == ("1g.10gb", "3g.40gb", "7g.80gb")
    pub = publication("node-0000", "mig-rec")
    gpu0 = [d.name for d in pub.devices if d.name.startswith("gpu-0-")]
    assert len(gpu0) == 7 + 2 + 1  # 1g.10gb x7, 3g.40gb x2, 7g.80gb x1
    assert len(pub.devices) == 8 * 11  # and the 8 full GPUs
    assert len(publication("node-0000", "mig-families").devices) == 8 * 22
    assert len(publication("node-0000", "mig").devices) == 8 * 26


def test_every_mig_layout_asks_for_one_1g_slice() -> None:
    assert claim_template("mig-rec") == claim_template("mig")
    assert claim_template("full")["metadata"]["name"] == "h100"


def test_table_ratio_against_full_at_same_node_count() -> None:
    full, rec = Scenario("full", 100, bound=10), Scenario("mig-rec", 100, bound=10)
    other = Scenario("mig-rec", 500, bound=10)
    full.cpu_sched, rec.cpu_sched, other.cpu_sched = ({"kube-scheduler": x} for x in (0.2, 0.5, 0.5))
    rows = [line.split() for line in table([full, rec, other]).splitlines()[2:]]
    assert rows[1][0] == "mig-rec" and rows[1][7] == "50" and rows[1][8] == "2.5"
    assert rows[2][8] == "-"  # no full layout at 500 nodes in this run
