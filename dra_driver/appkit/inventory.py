"""A node's publication from its GPUs and MIG backend: the one path plugin, controller and CLI share.

Reads the MIG side of each GPU (catalog, mode, instances) through the backend and hands it to
the pure publication rules (``dra_driver.core.mig_publish``). Also carves a fixed MIG layout
for ``dra-gpu inventory --mig static --fake-mig-layout`` (the fake GPUs' mig-parted).
"""

from __future__ import annotations

from collections.abc import Sequence

from dra_driver.core.gpu import GpuInfo
from dra_driver.core.mig import MigBackend, MigStrategy, free_placements
from dra_driver.core.mig_publish import GpuMigState, Publication, full_gpu_states, publish_node


def gpu_states(gpus: Sequence[GpuInfo], backend: MigBackend | None) -> list[GpuMigState]:
    """Each GPU with its MIG catalog, mode and instances (no backend: full GPUs as NVML saw them)."""
    if backend is None:
        return full_gpu_states(gpus)
    out: list[GpuMigState] = []
    for g in gpus:
        catalog = backend.catalog(g)
        if catalog is None:
            out.extend(full_gpu_states([g]))
            continue
        out.append(GpuMigState(gpu=g, catalog=catalog, mode=backend.mode(g), instances=tuple(backend.instances(g))))
    return out


def node_publication(
    gpus: Sequence[GpuInfo],
    strategy: MigStrategy,
    backend: MigBackend | None,
    *,
    consumable: bool = False,
    mig_profiles: Sequence[str] = (),
) -> Publication:
    """What the node publishes under ``strategy``.

    With ``consumable``, GPUs shared by capacity; with ``mig_profiles``, dynamic MIG limited to those profiles.
    """
    states = gpu_states(gpus, backend if strategy is not MigStrategy.NONE else None)
    return publish_node(states, strategy, consumable=consumable, mig_profiles=mig_profiles)


def carve_layout(gpus: Sequence[GpuInfo], backend: MigBackend, profiles: Sequence[str]) -> None:
    """Carve the named profiles on every MIG-capable GPU, each at its highest free placement.

    Raises ValueError naming a profile the GPU lacks or one that no longer fits.
    """
    for g in gpus:
        catalog = backend.catalog(g)
        if catalog is None:
            continue
        if not backend.mode(g).current:
            backend.set_mode(g, True)
        for name in profiles:
            profile = next((p for p in catalog.profiles if p.name == name), None)
            if profile is None:
                known = ", ".join(p.name for p in catalog.profiles)
                raise ValueError(f"{g.product_name} has no MIG profile {name!r}; it has {known}")
            free = free_placements(profile, [i.placement for i in backend.instances(g)])
            if not free:
                raise ValueError(f"MIG profile {name} no longer fits on GPU {g.minor} in the layout {','.join(profiles)}")
            start = max(p.start for p in free)
            gi = backend.create_gpu_instance(g, profile.profile_id, start)
            backend.create_compute_instance(g, gi)
