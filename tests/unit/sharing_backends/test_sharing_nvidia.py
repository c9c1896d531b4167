"""NvidiaSharing (real-GPU sharing) against stand-in ``nvidia-smi`` and ``nvidia-cuda-mps-control``.

The stand-ins are small Python scripts written into the test's bin dir. Each appends one JSON line
per call to ``calls.jsonl``: which tool, its argv, the stdin it was given (the control program's
commands) and the MPS environment (pipe and log dirs, ``CUDA_VISIBLE_DEVICES``). The control
program behaves like the real one where NvidiaSharing relies on it: ``-d`` leaves a ``control``
socket stand-in in the pipe dir, commands fail with "Cannot find MPS control daemon process" when
there is none, ``quit`` removes it. ``fail.json`` makes a matching call fail (exit code and stderr)
or hang, so the tests see what a broken driver install looks like.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from dra_driver.core.config import TimeSliceInterval
from dra_driver.core.sharing import MpsDaemon, mps_dirs
from dra_driver.sharing_backends.nvidia import NvidiaSharing

GPU0 = "GPU-11111111-2222-3333-4444-555555555555"
GPU1 = "GPU-66666666-7777-8888-9999-000000000000"
MIG0 = "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
GIB = 1 << 30
ENV_KEYS = ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY", "CUDA_VISIBLE_DEVICES")

STAND_IN = """#!{python}
import json, os, sys, time
from pathlib import Path

here = Path(__file__).resolve().parent
tool = Path(sys.argv[0]).name
args = sys.argv[1:]
# The control program reads commands from stdin when it has no arguments; nothing else reads it.
stdin = sys.stdin.read() if tool == "nvidia-cuda-mps-control" and not args else None
call = {{"tool": tool, "argv": args, "stdin": stdin, "env": {{k: os.environ.get(k) for k in {keys!r}}}}}
with (here / "calls.jsonl").open("a") as f:
    f.write(json.dumps(call) + "\\n")
line = " ".join([tool, *args]) + ("" if stdin is None else " <<< " + stdin.strip())
fail = here / "fail.json"
if fail.exists():
    rule = json.loads(fail.read_text())
    if rule["match"] in line:
        time.sleep(rule.get("sleep", 0))
        sys.stderr.write(rule["stderr"] + "\\n")
        sys.exit(rule["code"])
if tool == "nvidia-cuda-mps-control":
    control = Path(os.environ["CUDA_MPS_PIPE_DIRECTORY"]) / "control"
    if args == ["-d"]:
        control.write_text("")
    elif not control.exists():
        sys.stdout.write("Cannot find MPS control daemon process\\n")
        sys.exit(1)
    elif stdin.split() == ["quit"]:
        control.unlink()
"""


class Tools:
    """The stand-ins' bin dir: install them, read what they were called with, make calls fail."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        bin_dir.mkdir()

    def install(self, *names: str) -> None:
        for name in names:
            path = self.bin_dir / name
            path.write_text(STAND_IN.format(python=sys.executable, keys=ENV_KEYS))
            path.chmod(0o755)

    def calls(self) -> list[dict[str, Any]]:
        log = self.bin_dir / "calls.jsonl"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def lines(self) -> list[str]:
        """Each call as one line: ``tool argv... [<<< stdin]``."""
        out = []
        for c in self.calls():
            text = " ".join([c["tool"], *c["argv"]])
            out.append(text if c["stdin"] is None else f"{text} <<< {c['stdin']!r}")
        return out

    def forget(self) -> None:
        (self.bin_dir / "calls.jsonl").unlink(missing_ok=True)

    def fail(self, match: str, *, code: int = 3, stderr: str = "", sleep: float = 0) -> None:
        (self.bin_dir / "fail.json").write_text(json.dumps({"match": match, "code": code, "stderr": stderr, "sleep": sleep}))


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Tools:
    for key in ENV_KEYS:  # the daemon env must come from NvidiaSharing, not from whoever runs the tests
        monkeypatch.delenv(key, raising=False)
    t = Tools(tmp_path / "bin")
    t.install("nvidia-smi", "nvidia-cuda-mps-control")
    return t


@pytest.fixture
def mps_root(tmp_path: Path) -> Path:
    return tmp_path / "mps"


def sharing(tools: Tools, mps_root: Path, timeout_s: float = 30.0) -> NvidiaSharing:
    return NvidiaSharing(bin_dir=tools.bin_dir, mps_root=mps_root, timeout_s=timeout_s)


def claim_daemon() -> MpsDaemon:
    """A per-claim daemon on two full GPUs with a thread percentage and per-GPU pinned limits."""
    return MpsDaemon(
        daemon_id="0f7c2d4e-claim-1a2b3c4d",
        gpu_uuids=(GPU0, GPU1),
        exclusive_gpus=(GPU0, GPU1),
        active_thread_percentage=50,
        pinned_memory_limits=((GPU0, 10 * GIB), (GPU1, GIB + GIB // 2 + 100)),
    )


# -- time slices -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("interval", "level"),
    [
        (TimeSliceInterval.DEFAULT, 0),
        (TimeSliceInterval.SHORT, 1),
        (TimeSliceInterval.MEDIUM, 2),
        (TimeSliceInterval.LONG, 3),
    ],
)
def test_set_time_slice_runs_compute_policy_with_the_intervals_level(
    tools: Tools, mps_root: Path, interval: TimeSliceInterval, level: int
) -> None:
    sharing(tools, mps_root).set_time_slice(GPU0, interval)
    assert [f"nvidia-smi compute-policy -i {GPU0} --set-timeslice={level}"] == tools.lines()


# -- MPS: start ----------------------------------------------------------------------------------------


def test_start_mps_makes_gpus_exclusive_starts_the_daemon_then_sets_its_default_limits(tools: Tools, mps_root: Path) -> None:
    daemon = claim_daemon()
    sharing(tools, mps_root).start_mps(daemon)

    dirs = mps_dirs(str(mps_root), daemon.daemon_id)
    mps = "nvidia-cuda-mps-control"
    assert [
        f"nvidia-smi -i {GPU0} -c EXCLUSIVE_PROCESS",
        f"nvidia-smi -i {GPU1} -c EXCLUSIVE_PROCESS",
        f"{mps} -d",
        f"{mps} <<< 'set_default_active_thread_percentage 50\\n'",
        f"{mps} <<< 'set_default_device_pinned_mem_limit {GPU0} 10240M\\n'",
        f"{mps} <<< 'set_default_device_pinned_mem_limit {GPU1} 1536M\\n'",  # bytes rounded down to MiB
    ] == tools.lines()
    daemon_env = {
        "CUDA_MPS_PIPE_DIRECTORY": dirs.pipe,
        "CUDA_MPS_LOG_DIRECTORY": dirs.log,
        "CUDA_VISIBLE_DEVICES": f"{GPU0},{GPU1}",
    }
    calls = tools.calls()
    for call in calls[2:]:  # the daemon and every command to it: its own pipe and log dirs, its GPUs
        assert daemon_env == call["env"], call
    for call in calls[:2]:  # nvidia-smi runs with the plugin's environment, no MPS dirs
        assert dict.fromkeys(ENV_KEYS) == call["env"], call
    for d in (dirs.pipe, dirs.log, dirs.shm):
        assert Path(d).is_dir(), d


def test_start_mps_on_a_mig_device_leaves_the_compute_mode_and_sends_no_unset_limit(tools: Tools, mps_root: Path) -> None:
    """A MIG device's daemon: no nvidia-smi call (no exclusive GPU), no command for limits that are not set."""
    daemon = MpsDaemon(daemon_id="claim-mig", gpu_uuids=(MIG0,))
    sharing(tools, mps_root).start_mps(daemon)
    assert ["nvidia-cuda-mps-control -d"] == tools.lines()
    assert MIG0 == tools.calls()[0]["env"]["CUDA_VISIBLE_DEVICES"]


def test_a_pinned_limit_under_one_mib_is_sent_as_1m_not_as_no_limit(tools: Tools, mps_root: Path) -> None:
    daemon = MpsDaemon(daemon_id="tiny", gpu_uuids=(GPU0,), pinned_memory_limits=((GPU0, 100),))
    sharing(tools, mps_root).start_mps(daemon)
    assert f"nvidia-cuda-mps-control <<< 'set_default_device_pinned_mem_limit {GPU0} 1M\\n'" == tools.lines()[-1]


def test_start_mps_when_the_daemon_already_answers_changes_nothing(tools: Tools, mps_root: Path) -> None:
    s = sharing(tools, mps_root)
    daemon = claim_daemon()
    s.start_mps(daemon)
    tools.forget()

    s.start_mps(daemon)  # e.g. prepare retried, or the plugin restarted and re-applies its checkpoint

    assert ["nvidia-cuda-mps-control <<< 'get_server_list\\n'"] == tools.lines()
    assert mps_dirs(str(mps_root), daemon.daemon_id).pipe == tools.calls()[0]["env"]["CUDA_MPS_PIPE_DIRECTORY"]


def test_start_mps_restarts_a_daemon_whose_pipe_dir_is_left_but_which_does_not_answer(tools: Tools, mps_root: Path) -> None:
    """After a node reboot the directories survive but the daemon is gone: it is started (and configured) again."""
    s = sharing(tools, mps_root)
    daemon = claim_daemon()
    s.start_mps(daemon)
    (Path(mps_dirs(str(mps_root), daemon.daemon_id).pipe) / "control").unlink()  # the daemon died
    tools.forget()

    s.start_mps(daemon)

    lines = tools.lines()
    assert "nvidia-cuda-mps-control <<< 'get_server_list\\n'" == lines[0]
    assert "nvidia-cuda-mps-control -d" in lines
    assert f"nvidia-cuda-mps-control <<< 'set_default_device_pinned_mem_limit {GPU0} 10240M\\n'" in lines
    assert s.mps_running(daemon.daemon_id)


# -- MPS: running, stop ----------------------------------------------------------------------------


def test_mps_running_asks_the_daemon_only_when_its_pipe_dir_exists(tools: Tools, mps_root: Path) -> None:
    s = sharing(tools, mps_root)
    daemon = claim_daemon()
    assert not s.mps_running(daemon.daemon_id)
    assert [] == tools.lines()  # no pipe dir: not even asked

    Path(mps_dirs(str(mps_root), daemon.daemon_id).pipe).mkdir(parents=True)
    assert not s.mps_running(daemon.daemon_id)  # the control program finds no daemon and exits 1

    s.start_mps(daemon)
    assert s.mps_running(daemon.daemon_id)


def test_stop_mps_quits_the_daemon_restores_the_default_compute_mode_and_removes_its_dirs(tools: Tools, mps_root: Path) -> None:
    s = sharing(tools, mps_root)
    daemon = claim_daemon()
    s.start_mps(daemon)
    tools.forget()

    s.stop_mps(daemon)

    mps = "nvidia-cuda-mps-control"
    assert [
        f"{mps} <<< 'get_server_list\\n'",
        f"{mps} <<< 'quit\\n'",
        f"nvidia-smi -i {GPU0} -c DEFAULT",
        f"nvidia-smi -i {GPU1} -c DEFAULT",
    ] == tools.lines()
    pipe = mps_dirs(str(mps_root), daemon.daemon_id).pipe
    assert pipe == tools.calls()[1]["env"]["CUDA_MPS_PIPE_DIRECTORY"]
    assert not (mps_root / daemon.daemon_id).exists()
    assert not s.mps_running(daemon.daemon_id)


def test_stop_mps_of_a_daemon_that_is_gone_still_restores_the_compute_mode(tools: Tools, mps_root: Path) -> None:
    """Unprepare after the daemon died (or never started): nothing to quit, but the GPUs go back to DEFAULT."""
    s = sharing(tools, mps_root)
    daemon = claim_daemon()
    s.stop_mps(daemon)
    assert [f"nvidia-smi -i {GPU0} -c DEFAULT", f"nvidia-smi -i {GPU1} -c DEFAULT"] == tools.lines()
    assert not (mps_root / daemon.daemon_id).exists()


# -- failures ------------------------------------------------------------------------------------------


def test_a_failing_nvidia_smi_is_an_oserror_with_the_command_and_its_stderr(tools: Tools, mps_root: Path) -> None:
    tools.fail("--set-timeslice", code=6, stderr="Failed to set the time slice: Not Supported")
    with pytest.raises(OSError, match="exited 6") as err:
        sharing(tools, mps_root).set_time_slice(GPU0, TimeSliceInterval.LONG)
    assert f"{tools.bin_dir / 'nvidia-smi'} compute-policy -i {GPU0} --set-timeslice=3" in str(err.value)
    assert "Failed to set the time slice: Not Supported" in str(err.value)


def test_a_daemon_that_fails_to_start_is_an_oserror_and_no_limit_is_sent(tools: Tools, mps_root: Path) -> None:
    tools.fail("nvidia-cuda-mps-control -d", code=1, stderr="An instance of this daemon is already running")
    with pytest.raises(OSError, match="An instance of this daemon is already running") as err:
        sharing(tools, mps_root).start_mps(claim_daemon())
    assert f"{tools.bin_dir / 'nvidia-cuda-mps-control'} -d exited 1" in str(err.value)
    assert not [line for line in tools.lines() if "set_default" in line]


def test_a_rejected_limit_command_is_an_oserror(tools: Tools, mps_root: Path) -> None:
    tools.fail("set_default_device_pinned_mem_limit", code=1, stderr="Invalid device")
    with pytest.raises(OSError, match="Invalid device"):
        sharing(tools, mps_root).start_mps(claim_daemon())


def test_exclusive_mode_refused_is_an_oserror_before_any_daemon_starts(tools: Tools, mps_root: Path) -> None:
    tools.fail("-c EXCLUSIVE_PROCESS", code=4, stderr="Insufficient Permissions")
    with pytest.raises(OSError, match="Insufficient Permissions") as err:
        sharing(tools, mps_root).start_mps(claim_daemon())
    assert f"-i {GPU0} -c EXCLUSIVE_PROCESS exited 4" in str(err.value)
    assert [f"nvidia-smi -i {GPU0} -c EXCLUSIVE_PROCESS"] == tools.lines()


def test_a_hanging_tool_is_an_oserror_after_the_timeout(tools: Tools, mps_root: Path) -> None:
    tools.fail("--set-timeslice", sleep=30, stderr="never")
    with pytest.raises(OSError, match="timed out"):
        sharing(tools, mps_root, timeout_s=0.5).set_time_slice(GPU0, TimeSliceInterval.SHORT)


@pytest.mark.parametrize("missing", ["nvidia-smi", "nvidia-cuda-mps-control"])
def test_a_missing_tool_is_an_oserror_naming_it(tmp_path: Path, mps_root: Path, missing: str) -> None:
    tools = Tools(tmp_path / "bin")
    tools.install(*({"nvidia-smi", "nvidia-cuda-mps-control"} - {missing}))
    s = sharing(tools, mps_root)
    with pytest.raises(OSError, match=str(tools.bin_dir / missing)):
        if missing == "nvidia-smi":
            s.set_time_slice(GPU0, TimeSliceInterval.LONG)
        else:
            s.start_mps(MpsDaemon(daemon_id="claim-mig", gpu_uuids=(MIG0,)))


def test_a_tool_that_is_not_executable_is_an_oserror(tools: Tools, mps_root: Path) -> None:
    (tools.bin_dir / "nvidia-smi").chmod(0o644)
    with pytest.raises(OSError, match="nvidia-smi"):
        sharing(tools, mps_root).set_time_slice(GPU0, TimeSliceInterval.LONG)
