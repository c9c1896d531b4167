"""The idle rule and the idle clock (dra_driver.core.usage): pure, so every case is a few samples."""

from __future__ import annotations

import pytest

from dra_driver.core.usage import (
    Activity,
    IdlePolicy,
    IdleTracker,
    UsageSample,
    claim_idle_seconds,
    classify,
)

GIB = 1 << 30
KEY = ("uid-1", "gpu-0")
T0 = 1_000_000.0


def sample(util: float | None, mem: int | None = 0, at: float = T0, device: str = "gpu-0") -> UsageSample:
    return UsageSample(device=device, gpu_uuid="GPU-a", mig_uuid=None, utilization=util, memory_used_bytes=mem, at=at)


@pytest.mark.parametrize(
    ("util", "mem", "policy", "expected"),
    [
        (0.0, 0, IdlePolicy(), Activity.IDLE),
        (0.049, 0, IdlePolicy(), Activity.IDLE),
        (0.05, 0, IdlePolicy(), Activity.BUSY),  # the threshold itself is busy
        (0.9, 0, IdlePolicy(), Activity.BUSY),
        (None, 0, IdlePolicy(), Activity.UNKNOWN),
        (None, 40 * GIB, IdlePolicy(memory_floor_bytes=GIB), Activity.UNKNOWN),  # memory alone never decides unknown
        # default: memory does not decide, a model held in memory and never used is idle
        (0.0, 40 * GIB, IdlePolicy(), Activity.IDLE),
        (0.0, 40 * GIB, IdlePolicy(memory_floor_bytes=GIB), Activity.BUSY),
        (0.0, GIB - 1, IdlePolicy(memory_floor_bytes=GIB), Activity.IDLE),
        (0.0, None, IdlePolicy(memory_floor_bytes=GIB), Activity.IDLE),  # unknown memory does not make it busy
        (0.1, 0, IdlePolicy(utilization_threshold=0.2), Activity.IDLE),
    ],
)
def test_classify_follows_the_documented_rule(
    util: float | None, mem: int | None, policy: IdlePolicy, expected: Activity
) -> None:
    assert classify(sample(util, mem), policy) is expected


def test_no_sample_is_unknown() -> None:
    assert classify(None, IdlePolicy()) is Activity.UNKNOWN


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5])
def test_policy_refuses_a_threshold_outside_zero_to_one(bad: float) -> None:
    with pytest.raises(ValueError, match="threshold"):
        IdlePolicy(utilization_threshold=bad)


def test_policy_refuses_a_negative_memory_floor() -> None:
    with pytest.raises(ValueError, match="floor"):
        IdlePolicy(memory_floor_bytes=-1)


def test_a_new_device_idle_at_its_first_sample_has_been_idle_since_its_prepare() -> None:
    t = IdleTracker().observe({KEY: T0 - 600}, {KEY: sample(0.0, at=T0)}, T0)
    clock = t.clock(KEY)
    assert clock is not None
    assert clock.idle_since == T0 - 600
    assert clock.idle_seconds(T0) == 600


def test_a_prepare_time_in_the_future_is_clamped_to_now() -> None:
    t = IdleTracker().observe({KEY: T0 + 50}, {KEY: sample(0.0)}, T0)
    clock = t.clock(KEY)
    assert clock is not None
    assert clock.idle_since == T0
    assert clock.idle_seconds(T0 - 10) == 0.0  # never negative


def test_idle_seconds_grow_across_idle_samples_and_reset_on_a_busy_one() -> None:
    t = IdleTracker().observe({KEY: T0}, {KEY: sample(0.0, at=T0)}, T0)
    t = t.observe({KEY: T0}, {KEY: sample(0.01, at=T0 + 10)}, T0 + 10)
    c = t.clock(KEY)
    assert c is not None
    assert c.idle_seconds(T0 + 10) == 10
    t = t.observe({KEY: T0}, {KEY: sample(0.5, at=T0 + 20)}, T0 + 20)
    c = t.clock(KEY)
    assert c is not None
    assert c.idle_since is None
    assert c.idle_seconds(T0 + 20) == 0
    t = t.observe({KEY: T0}, {KEY: sample(0.0, at=T0 + 30)}, T0 + 30)
    c = t.clock(KEY)
    assert c is not None
    assert c.idle_since == T0 + 30  # restarts at the idle sample, not at the prepare time
    assert c.activity is Activity.IDLE


def test_an_unknown_sample_stops_the_clock_and_never_counts_as_idle() -> None:
    t = IdleTracker().observe({KEY: T0 - 3600}, {KEY: sample(0.0)}, T0)
    t = t.observe({KEY: T0 - 3600}, {}, T0 + 10)  # the source could not read it
    c = t.clock(KEY)
    assert c is not None
    assert c.activity is Activity.UNKNOWN
    assert c.idle_seconds(T0 + 10) == 0
    t = t.observe({KEY: T0 - 3600}, {KEY: sample(0.0, at=T0 + 20)}, T0 + 20)
    c = t.clock(KEY)
    assert c is not None
    assert c.idle_since == T0 + 20


def test_a_device_whose_utilization_is_never_known_is_never_idle() -> None:
    t = IdleTracker()
    for i in range(10):
        t = t.observe({KEY: T0 - 7200}, {KEY: sample(None, mem=0, at=T0 + i)}, T0 + i)
    c = t.clock(KEY)
    assert c is not None
    assert c.idle_seconds(T0 + 10) == 0


def test_devices_no_longer_prepared_are_forgotten_and_the_old_tracker_is_unchanged() -> None:
    t1 = IdleTracker().observe({KEY: T0}, {KEY: sample(0.0)}, T0)
    t2 = t1.observe({}, {}, T0 + 10)
    assert t2.clock(KEY) is None
    assert t1.clock(KEY) is not None  # immutable: observe returns a new tracker


def test_the_same_samples_give_the_same_clocks() -> None:
    steps = [({KEY: T0}, {KEY: sample(u, at=T0 + i)}, T0 + i) for i, u in enumerate([0.0, 0.0, 0.3, 0.0, None, 0.0])]
    runs = []
    for _ in range(2):
        t = IdleTracker()
        for prepared, samples, now in steps:
            t = t.observe(prepared, samples, now)
        runs.append(dict(t.clocks))
    assert runs[0] == runs[1]


def test_a_claim_is_idle_only_as_long_as_its_least_idle_device() -> None:
    k2 = ("uid-1", "gpu-1")
    other = ("uid-2", "gpu-2")
    prepared = {KEY: T0 - 100, k2: T0 - 100, other: T0 - 100}
    samples = {KEY: sample(0.0), k2: sample(0.0, device="gpu-1"), other: sample(0.0, device="gpu-2")}
    t = IdleTracker().observe(prepared, samples, T0)
    assert claim_idle_seconds(t, "uid-1", T0) == 100
    samples[k2] = sample(0.7, device="gpu-1", at=T0 + 10)
    t = t.observe(prepared, samples, T0 + 10)
    assert claim_idle_seconds(t, "uid-1", T0 + 10) == 0  # one busy device: the claim is in use
    assert claim_idle_seconds(t, "uid-2", T0 + 10) == 110
    assert claim_idle_seconds(t, "unknown-claim", T0 + 10) == 0
