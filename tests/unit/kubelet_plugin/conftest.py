"""Fixtures shared by the kubelet plugin's unit tests: ``device_state``, the one way a test builds a ``DeviceState``."""

from __future__ import annotations

import pytest

from tests.unit.kubelet_plugin.device_states import DeviceStateFactory, new_device_state


@pytest.fixture
def device_state() -> DeviceStateFactory:
    """Builds a started ``DeviceState`` over a folder (``device_states.new_device_state``)."""
    return new_device_state
