"""The kubelet plugin's ``DeviceState`` as unit tests build it: over files in one folder, with an in-memory claim reader.

``new_device_state`` is the one place tests construct a ``DeviceState``; the ``device_state``
fixture (``conftest.py`` beside this module) hands it to tests, and the tests' own helpers
(``make_state``, the ``Node`` classes, ``tests.unit.obs.test_metrics``, ``tests.fuzz.test_fuzz_plugin``) call it
directly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from dra_driver.core.gpu import GpuInfo
from dra_driver.core.mig_publish import Publication
from dra_driver.files.cdi_store import CdiStore
from dra_driver.files.checkpoint_store import CheckpointStore
from dra_driver.sharing_backends.sim import SimulatedSharing
from dra_driver.sources.fake import FakeGpuSource
from kubelet_plugin.prepare.requests import ClaimReader, ClaimRef
from kubelet_plugin.prepare.state import DeviceState
from testkit.claimdata import DRIVER


class Claims:
    """An in-memory claim reader for unit tests (integration tests use the real API server)."""

    def __init__(self) -> None:
        self.objs: dict[tuple[str, str], dict[str, Any]] = {}

    def add(self, obj: dict[str, Any]) -> ClaimRef:
        m = obj["metadata"]
        self.objs[(m["namespace"], m["name"])] = obj
        return ClaimRef(m["namespace"], m["uid"], m["name"])

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        try:
            return self.objs[(namespace, name)]
        except KeyError:
            raise LookupError(f"claim {namespace}/{name} not found") from None


def new_device_state(
    root: Path,
    claims: ClaimReader,
    *,
    boot: str = "boot-1",
    profile: str = "h100x8",
    gpus: list[GpuInfo] | None = None,
    publication: Publication | None = None,
    sharing: bool = False,
    device_nodes: bool = False,
    start: bool = True,
    **options: Any,
) -> DeviceState:
    """A plugin's state on node-a over ``root`` (``cdi/``, ``plugin/``, ``serialize.lock``), started unless ``start`` is false.

    The GPUs: ``publication`` when given, else ``gpus``, else the fake ``profile``'s; ``sharing``
    adds the simulated sharing backend under ``root``; ``options`` go to ``DeviceState`` as they are.
    """
    root.mkdir(parents=True, exist_ok=True)
    if publication is None and gpus is None:
        gpus = FakeGpuSource(profile, "node-a").gpus()
    state = DeviceState(
        driver=DRIVER,
        node_name="node-a",
        gpus=gpus,
        publication=publication,
        sharing=SimulatedSharing(root / "fake-gpus", root / "mps") if sharing else None,
        claims=claims,
        cdi=CdiStore(root / "cdi", DRIVER),
        checkpoints=CheckpointStore(root / "plugin", boot),
        lock_path=root / "serialize.lock",
        device_nodes=device_nodes,
        **options,
    )
    if start:
        state.startup()
    return state


class DeviceStateFactory(Protocol):
    """What the ``device_state`` fixture is: ``new_device_state``'s signature."""

    def __call__(
        self,
        root: Path,
        claims: ClaimReader,
        *,
        boot: str = ...,
        profile: str = ...,
        gpus: list[GpuInfo] | None = ...,
        publication: Publication | None = ...,
        sharing: bool = ...,
        device_nodes: bool = ...,
        start: bool = ...,
        **options: Any,
    ) -> DeviceState:
        """A plugin's state over ``root``."""
        ...
