"""Which MIG profiles a node publishes with dynamic MIG (``--mig-profiles``, chart ``mig.profiles``).

Pure. ``parse_mig_profiles`` reads the flag (checked by ``dra_driver.appkit.flags.check_common``, so
a bad entry stops the daemon at start naming it); ``profile_selected`` is what
``dra_driver.core.mig_publish`` asks for every profile of every GPU.

An entry is a profile name as NVML spells it without its ``MIG `` prefix (``1g.10gb``,
``1g.10gb+me``) or a family, the compute slices alone (``1g``: every profile of one compute slice,
``1g.10gb``, ``1g.20gb`` and ``1g.10gb+me`` on an H100), so one setting serves a fleet of several
GPU products. No entry: every profile. Fewer profiles mean fewer published devices (each one a
placement the scheduler looks at for every pod) and fewer sizes to fragment memory with.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from dra_driver.core.mig import MigProfile

MAX_TEXT = 1024
"""The longest ``--mig-profiles`` value read."""
MAX_ENTRIES = 32
"""More entries than any GPU has profiles is a mistake, not a selection."""
_ENTRY = re.compile(r"[1-9][0-9]?g(?:\.[1-9][0-9]{0,3}gb(?:\+me)?)?")


def parse_mig_profiles(text: str | None) -> tuple[str, ...]:
    """The entries of a comma-separated list (empty or None: every profile); ValueError naming a bad entry."""
    if not text or not text.strip():
        return ()
    if len(text) > MAX_TEXT:
        raise ValueError(f"the list is {len(text)} characters long; at most {MAX_TEXT}")
    out: list[str] = []
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            raise ValueError(f"an empty entry in {text!r}")
        if not _ENTRY.fullmatch(entry):
            raise ValueError(
                f"{entry[:40]!r} is neither a MIG profile name (e.g. 1g.10gb, 1g.10gb+me) nor a family (e.g. 1g, 3g, 7g)"
            )
        if entry not in out:
            out.append(entry)
    if len(out) > MAX_ENTRIES:
        raise ValueError(f"{len(out)} entries; at most {MAX_ENTRIES}")
    return tuple(out)


def family(profile: MigProfile) -> str:
    """The profile's family: its compute slices, ``1g`` for ``1g.10gb``."""
    return f"{profile.slices}g"


def profile_selected(profile: MigProfile, selection: Sequence[str]) -> bool:
    """Whether dynamic MIG publishes ``profile``'s placements (every profile when ``selection`` is empty)."""
    return not selection or profile.name in selection or family(profile) in selection


def unmatched(selection: Sequence[str], profiles: Sequence[MigProfile]) -> list[str]:
    """The entries of ``selection`` that no profile in ``profiles`` answers to."""
    return [e for e in selection if not any(p.name == e or family(p) == e for p in profiles)]
