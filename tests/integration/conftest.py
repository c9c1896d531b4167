"""Fixtures for integration tests: a real API server, and the real plugin daemon over its sockets."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.cluster import LocalCluster
from testkit.plugin_process import PluginProcess


@pytest.fixture(scope="session")
def apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """etcd + kube-apiserver built from source (testkit/go/build.sh), shared by the session."""
    with LocalCluster(log_dir=tmp_path_factory.mktemp("k8s-logs")) as c:
        c.add_node("node-a")
        yield c


@pytest.fixture
def plugin(tmp_path: Path, apiserver: LocalCluster) -> Iterator[PluginProcess]:
    """A plugin daemon for node-a with fake H100s, not publishing slices (publisher tests do that)."""
    p = PluginProcess(tmp_path, kubeconfig=apiserver.kubeconfig)
    p.start()
    yield p
    p.stop()
