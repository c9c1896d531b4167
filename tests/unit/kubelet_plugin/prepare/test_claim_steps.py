"""One claim's prepare steps (``kubelet_plugin.prepare.claim_steps``): the claim is decoded once, its configs resolved once.

The spies sit where every decode and every resolution passes, whichever module calls it:
``parse_claim`` builds its answer through ``dra_driver.core.claims.ClaimAllocation``, and
``resolve_configs`` (like ``resolve_device_configs``) decodes through
``dra_driver.core.config._decode_entries``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dra_driver.core import claims as core_claims
from dra_driver.core import config as core_config
from kubelet_plugin.prepare.state import DeviceState
from testkit.claimdata import allocated_claim
from tests.unit.kubelet_plugin.device_states import Claims, DeviceStateFactory
from tests.unit.kubelet_plugin.prepare.test_state import TIME_SLICED
from tests.unit.kubelet_plugin.prepare.test_state_failclosed import Claims as MigClaims
from tests.unit.kubelet_plugin.prepare.test_state_failclosed import Node, mig_claim


def spy(monkeypatch: pytest.MonkeyPatch, calls: Counter[str]) -> None:
    """Count claim decodes (``parsed``) and config resolutions (``resolved``) from here on."""

    def counting(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return real(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(core_claims, "ClaimAllocation", counting("parsed", core_claims.ClaimAllocation))
    monkeypatch.setattr(core_config, "_decode_entries", counting("resolved", core_config._decode_entries))


def prepared(state: DeviceState, *refs: Any) -> None:
    out = state.prepare(list(refs))
    assert {ref.uid: "" for ref in refs} == {uid: o.error for uid, o in out.items()}


def test_a_shared_claim_is_parsed_once_and_its_config_resolved_once(
    tmp_path: Path, device_state: DeviceStateFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checked before the lock, planned twice (before and after its side effects): one decode, one resolution."""
    claims = Claims()
    ref = claims.add(allocated_claim(config=TIME_SLICED))
    state = device_state(tmp_path, claims, sharing=True)
    calls: Counter[str] = Counter()
    spy(monkeypatch, calls)
    prepared(state, ref)
    assert {"parsed": 1, "resolved": 1} == dict(calls)


def test_each_claim_of_a_call_is_parsed_once_and_resolved_once(
    tmp_path: Path, device_state: DeviceStateFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    claims = Claims()
    refs = [claims.add(allocated_claim(name=f"c{i}", devices=[f"gpu-{i}"])) for i in range(3)]
    state = device_state(tmp_path, claims)
    calls: Counter[str] = Counter()
    spy(monkeypatch, calls)
    prepared(state, *refs)
    assert {"parsed": 3, "resolved": 3} == dict(calls)


def test_a_dynamic_mig_claim_is_parsed_once_and_resolved_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A carve plans the claim before the MIG instance exists and again after: still one of each."""
    claims = MigClaims()
    state = Node(tmp_path, claims).start()
    ref = mig_claim(claims, "gpu-0-mig-1g10gb-6")
    calls: Counter[str] = Counter()
    spy(monkeypatch, calls)
    prepared(state, ref)
    assert {"parsed": 1, "resolved": 1} == dict(calls)
