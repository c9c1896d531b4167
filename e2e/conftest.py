"""Pytest fixtures for the e2e suite: one LocalCluster per test module, the built Helm.

Component logs go to pytest's temp dir (kept for the last few runs); a failing
test's report names that dir and shows the tail of the apiserver log.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator

import pytest

from testkit.cluster import LocalCluster
from testkit.helm_cli import Helm


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """etcd + kube-apiserver only; tests needing more build their own LocalCluster."""
    with LocalCluster(log_dir=tmp_path_factory.mktemp("k8s-logs")) as c:
        yield c


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """The built Helm binary; fails (never skips) naming testkit/go/helm/build.sh when it is missing."""
    return Helm.built(tmp_path_factory.mktemp("helm-home"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    c = getattr(item, "funcargs", {}).get("cluster")
    if report.failed and isinstance(c, LocalCluster):
        log = c.log_dir / "kube-apiserver.log"
        tail = log.read_text(errors="replace").splitlines()[-30:] if log.exists() else []
        report.sections.append(("k8s logs", f"component logs in {c.log_dir}\n" + "\n".join(tail)))
    return report
