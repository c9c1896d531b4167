"""Writes and removes the per-claim CDI spec files under the CDI root.

Called by the kubelet plugin's state. Specs are JSON (a format every CDI runtime reads),
written atomically, world-readable (the container runtime reads them) but in a directory the
plugin owns. Also scans the host's NVIDIA Container Toolkit spec for its GPU device names.

Writes and removals are atomic but not fsynced: a spec matters only within one boot. A killed
plugin loses nothing it wrote (the page cache outlives the process); only a kernel crash or a
power loss can lose an unsynced spec, and after the reboot that follows, the checkpoint's boot id
drops every claim of the old boot and their specs are removed anyway (they are usually on tmpfs,
``/var/run/cdi``, and gone already). The checkpoint, which must outlive a reboot to say so, is
the only state written durably.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import structlog

from dra_driver.core.cdi import TOOLKIT_CDI_KIND, spec_file_name, spec_file_prefix
from dra_driver.files.atomic import move_aside, remove_stale_temps, write_atomic
from dra_driver.files.background_sync import BackgroundSync

log = structlog.get_logger(__name__)


class CdiStore:
    """The CDI spec files of one driver under one CDI root."""

    def __init__(self, root: Path, driver: str, later: BackgroundSync | None = None) -> None:
        """``later``: the thread that unlinks removed specs (their name is gone at once); None: unlinked inline."""
        self.root = root
        self.driver = driver
        self._later = later

    def ensure_root(self) -> None:
        """Create the CDI root if missing and drop temp files a killed writer left behind."""
        self.root.mkdir(parents=True, exist_ok=True)
        for p in remove_stale_temps(self.root):
            log.warning("cdi_stale_temp_removed", path=str(p))

    def path(self, claim_uid: str) -> Path:
        """Where a claim's spec lives."""
        return self.root / spec_file_name(self.driver, claim_uid)

    def write(self, claim_uid: str, spec: dict[str, Any]) -> Path:
        """Write (or re-write) a claim's spec atomically."""
        path = self.path(claim_uid)
        write_atomic(path, json.dumps(spec, sort_keys=True, separators=(",", ":")).encode() + b"\n", mode=0o644, durable=False)
        return path

    def read(self, claim_uid: str) -> dict[str, Any] | None:
        """A claim's spec as stored, or None when missing or unreadable."""
        try:
            data: dict[str, Any] = json.loads(self.path(claim_uid).read_bytes())
        except (OSError, ValueError):
            return None
        return data

    def remove(self, claim_uid: str) -> bool:
        """Remove a claim's spec (gone from its name before this returns); True if one existed."""
        aside = move_aside(self.path(claim_uid))
        if aside is None:
            return False
        if self._later is not None:
            self._later.discard(aside)
        else:
            aside.unlink(missing_ok=True)
        return True

    def claim_uids(self) -> set[str]:
        """Claim UIDs that have a spec file of this driver."""
        prefix = spec_file_prefix(self.driver)
        if not self.root.is_dir():
            return set()
        return {
            p.name[len(prefix) : -len(".json")]
            for p in self.root.iterdir()
            if p.name.startswith(prefix) and p.name.endswith(".json")
        }


def toolkit_device_names(roots: list[Path]) -> frozenset[str]:
    """Device names in the host's NVIDIA Container Toolkit CDI spec(s) (kind ``nvidia.com/gpu``).

    The toolkit writes YAML or JSON; YAML is a superset of JSON, so one parser reads both
    (``_load_spec``). Unreadable files are logged and skipped.
    """
    names: set[str] = set()
    for root in roots:
        if not root.is_dir():
            continue
        for p in sorted(root.iterdir()):
            if p.suffix not in (".yaml", ".yml", ".json") or p.name.startswith("k8s."):
                continue
            try:
                doc = _load_spec(p.read_text())
            except (OSError, ValueError) as err:  # yaml.YAMLError is a ValueError here: see _load_spec
                log.warning("toolkit_cdi_spec_unreadable", path=str(p), error=str(err))
                continue
            if isinstance(doc, dict) and doc.get("kind") == TOOLKIT_CDI_KIND:
                names.update(str(d.get("name")) for d in doc.get("devices") or [] if isinstance(d, dict))
    return frozenset(names)


def _load_spec(text: str) -> Any:
    """A toolkit spec's document: JSON when it parses as JSON, else YAML (a superset of JSON).

    The YAML parser is loaded only for a spec that is not JSON: a node without one (or with the
    GPU operator's JSON spec) never loads it (about 0.9 MiB of the plugin's resident memory).
    A YAML error is raised as a ``ValueError`` carrying its message.
    """
    try:
        return json.loads(text)
    except ValueError:
        pass
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ValueError(str(err)) from err
