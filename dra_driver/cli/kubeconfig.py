"""Which kubeconfig a live ``dra-gpu`` command reads when ``--kubeconfig`` is not given.

Called by ``dra_driver.cli.explain_live`` and ``dra_driver.cli.cordon``; kept apart from explain so
that commands which do not simulate never load the explain extra.
"""

from __future__ import annotations

import os
from pathlib import Path


def default_kubeconfig() -> str | None:
    """``$KUBECONFIG`` (first entry), else ``~/.kube/config`` if present, else None (in-cluster)."""
    env = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    if env:
        return env
    home = Path.home() / ".kube" / "config"
    return str(home) if home.is_file() else None
