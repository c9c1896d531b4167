"""The sharing simulator's records follow the node's boot, as real time slices and MPS daemons do."""

from __future__ import annotations

from pathlib import Path

from dra_driver.core.config import TimeSliceInterval
from dra_driver.core.sharing import MpsDaemon
from dra_driver.sharing_backends.sim import STATE_FILE, SimulatedSharing, read_sharing_state


def daemon() -> MpsDaemon:
    return MpsDaemon(daemon_id="d1", gpu_uuids=("GPU-1",))


def test_records_survive_a_plugin_restart_in_the_same_boot(tmp_path: Path) -> None:
    first = SimulatedSharing(tmp_path / "fake", tmp_path / "mps", boot_id="boot-1")
    first.set_time_slice("GPU-1", TimeSliceInterval.LONG)
    first.start_mps(daemon())
    again = SimulatedSharing(tmp_path / "fake", tmp_path / "mps", boot_id="boot-1")
    assert again.mps_running("d1")
    assert {"GPU-1": "Long"} == read_sharing_state(tmp_path / "fake" / STATE_FILE)["timeSlices"]


def test_a_new_boot_forgets_time_slices_and_daemons(tmp_path: Path) -> None:
    """A reboot reloads the driver (time slices back to default) and ends every MPS daemon."""
    first = SimulatedSharing(tmp_path / "fake", tmp_path / "mps", boot_id="boot-1")
    first.set_time_slice("GPU-1", TimeSliceInterval.LONG)
    first.start_mps(daemon())
    after = SimulatedSharing(tmp_path / "fake", tmp_path / "mps", boot_id="boot-2")
    assert not after.mps_running("d1")
    state = read_sharing_state(tmp_path / "fake" / STATE_FILE)
    assert ({}, {}, "boot-2") == (state["timeSlices"], state["mps"], state["bootID"])


def test_records_from_before_boot_ids_were_kept_are_adopted_not_dropped(tmp_path: Path) -> None:
    old = SimulatedSharing(tmp_path / "fake", tmp_path / "mps")  # no boot id: an older plugin's records
    old.set_time_slice("GPU-1", TimeSliceInterval.LONG)
    assert "" == read_sharing_state(tmp_path / "fake" / STATE_FILE)["bootID"]
    new = SimulatedSharing(tmp_path / "fake", tmp_path / "mps", boot_id="boot-1")
    new.set_time_slice("GPU-2", TimeSliceInterval.SHORT)
    state = read_sharing_state(tmp_path / "fake" / STATE_FILE)
    assert ({"GPU-1": "Long", "GPU-2": "Short"}, "boot-1") == (state["timeSlices"], state["bootID"])


def test_the_reset_happens_at_start_not_at_the_first_change_after_the_reboot(tmp_path: Path) -> None:
    """A node that rebooted and prepares nothing still shows no daemon of the earlier boot."""
    first = SimulatedSharing(tmp_path / "fake", tmp_path / "mps", boot_id="boot-1")
    first.start_mps(daemon())
    SimulatedSharing(tmp_path / "fake", tmp_path / "mps", boot_id="boot-2")
    state = read_sharing_state(tmp_path / "fake" / STATE_FILE)
    assert ({}, "boot-2") == (state["mps"], state["bootID"])
