"""The standalone controller's settings: one frozen dataclass, and the table of flags (each also an env var) that fills it.

Parsed by ``controller.main``; the rows are the ones the kubelet plugin shares
(``dra_driver.appkit.flags``), so the two never drift apart. The chart sets the env vars
(``tests/chart`` checks them against ``FLAGS``); ``docs/reference/flags.md`` lists them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dra_driver.appkit.flag_table import Fail, FlagTable, Values, rows
from dra_driver.appkit.flags import (
    COMMON_FLAGS,
    METRICS_DERIVED,
    NODE_GUARD_FLAGS,
    check_common,
    check_metrics,
    check_node_guards,
    metrics_flags,
)
from dra_driver.core.mig import MigStrategy
from dra_driver.obs.ports import DEFAULT_METRICS_ADDRESS
from dra_driver.obs.scrape_auth import NO_SCRAPE_AUTH, ScrapeAuthConfig


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    """Everything the standalone controller needs."""

    node_name: str
    driver_name: str
    fake_gpus: str | None
    kubeconfig: str | None
    log_level: str
    mig: MigStrategy = MigStrategy.NONE
    mig_profiles: tuple[str, ...] = ()
    """Dynamic MIG publishes only these profiles or families (``dra_driver.core.mig_profiles``); empty: all."""
    consumable: bool = False
    fake_gpu_state_dir: Path | None = None
    fake_mig_latency: str = "realistic"
    """Taken as the plugin takes it (a shared flag); the controller carves nothing, so it is unused."""
    metrics_port: int = -1
    """Prometheus /metrics port (plain HTTP), 0 = any, -1 = off (the flag's default: 9421)."""
    metrics_address: str = DEFAULT_METRICS_ADDRESS
    metrics_auth: ScrapeAuthConfig = NO_SCRAPE_AUTH
    """Who may scrape /metrics (``dra_driver.obs.scrape_auth``)."""
    device_plugin_check_interval_s: float = 30.0
    """Seconds between reads of the Node for a device plugin's GPUs (0: guard off, ``dra_driver.appkit.device_plugin_guard``)."""
    local_cordon_check_interval_s: float = 10.0
    """Seconds between reads of the Node for locally cordoned devices (0: off, ``dra_driver.appkit.local_cordon``)."""


def _check(fail: Fail, values: Values, parsed: Mapping[str, Any]) -> None:
    check_common(fail, values)
    check_node_guards(fail, values)
    check_metrics(fail, values, parsed)


FLAGS: FlagTable[ControllerSettings] = FlagTable(
    daemon="controller",
    prog="dra-gpu-controller",
    description="publish one node's dra-gpu ResourceSlices",
    settings=ControllerSettings,
    rows=rows(COMMON_FLAGS, NODE_GUARD_FLAGS, metrics_flags("controller")),
    check=_check,
    derived=METRICS_DERIVED,
)
"""The controller's flags, in ``--help``'s order."""


def parse(argv: list[str] | None = None) -> ControllerSettings:
    """Parse flags (env vars as defaults); exit 2 with a message naming a bad value."""
    return FLAGS.parse(argv)
