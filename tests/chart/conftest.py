"""Pytest fixtures for the chart tests: the built Helm (rendering and linting need no cluster)."""

from __future__ import annotations

import pytest

from testkit.helm_cli import Helm


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """The built Helm binary; fails (never skips) naming testkit/go/helm/build.sh when it is missing."""
    return Helm.built(tmp_path_factory.mktemp("helm-home"))
