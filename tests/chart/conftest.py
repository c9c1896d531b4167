"""Fixtures of the chart's render tests: the built Helm binary, as e2e/conftest.py gives it."""

from __future__ import annotations

import pytest

from e2e.helm_cli import Helm


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """The built Helm binary; fails (never skips) naming e2e/helm/build.sh when it is missing."""
    return Helm.built(tmp_path_factory.mktemp("helm-home"))
