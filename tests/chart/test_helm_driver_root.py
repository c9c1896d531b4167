"""The chart's driverRoot as Helm renders it: the mount, the plugin's settings, and the NVML loader run for real.

Covers the three installations the chart documents (a host install ``/``, the GPU Operator's
``/run/nvidia/driver``, GKE's ``/home/kubernetes/bin/nvidia``) and ``/usr/local/nvidia`` under a
host root. The loader script is the rendered one, run with ``sh`` against driver roots laid out
as each installation lays out its files (only its ``/driver-root`` and ``/run/dra-gpu`` paths are
pointed at temp dirs). Needs the Helm CLI (``testkit/go/helm/build.sh``).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dra_driver.core.driver_files import library_search_dirs
from kubelet_plugin.settings import parse
from testkit.helm_cli import PLUGIN, Helm, by_kind, env_of


def plugin_container(helm: Helm, *sets: str) -> dict[str, Any]:
    pod = by_kind(helm.template(*sets), "DaemonSet")[PLUGIN]["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    c["_volumes"] = {v["name"]: v for v in pod["volumes"]}
    return dict(c)


@pytest.mark.parametrize("root", ["/", "/run/nvidia/driver", "/home/kubernetes/bin/nvidia"])
def test_the_plugin_gets_the_mount_and_the_host_path_its_cdi_specs_name(
    helm: Helm, root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = plugin_container(helm, f"gpus.nvml.driverRoot={root}")
    env = env_of(c)
    assert ("/driver-root", root) == (env["DRIVER_ROOT"], env["DRIVER_ROOT_HOST_PATH"])
    assert root == c["_volumes"]["driver-root"]["hostPath"]["path"]
    assert "/driver-root" == next(m["mountPath"] for m in c["volumeMounts"] if m["name"] == "driver-root")
    for name in ("DRIVER_ROOT", "DRIVER_ROOT_HOST_PATH", "NODE_NAME"):  # the plugin reads them as rendered
        monkeypatch.setenv(name, env[name] if name != "NODE_NAME" else "node-a")
    settings = parse([])
    assert (Path("/driver-root"), root) == (settings.driver_root, settings.driver_root_host_path)


def test_fake_gpus_get_no_driver_root(helm: Helm) -> None:
    env = env_of(plugin_container(helm, "gpus.fake.profile=h100x8"))
    assert "DRIVER_ROOT" not in env and "DRIVER_ROOT_HOST_PATH" not in env


def loader(helm: Helm, root: str) -> str:
    """The rendered NVML loader script of the plugin's container."""
    command = plugin_container(helm, f"gpus.nvml.driverRoot={root}")["command"]
    assert ["/bin/sh", "-ec"] == command[:2]
    script: str = command[2]
    return script


def test_the_loader_searches_the_layouts_the_plugin_searches_in_the_same_order(helm: Helm) -> None:
    found = re.search(r"for dir in (.*?); do", loader(helm, "/"), re.DOTALL)
    assert found is not None
    assert list(library_search_dirs()) == found.group(1).replace("\\", " ").split()


@pytest.mark.parametrize(
    ("root", "lib_dir"),
    [
        ("/", "usr/lib/x86_64-linux-gnu"),
        ("/", "usr/lib64"),
        ("/", "usr/local/nvidia/lib64"),
        ("/", "run/nvidia/driver/usr/lib/x86_64-linux-gnu"),
        ("/", "home/kubernetes/bin/nvidia/lib64"),
        ("/run/nvidia/driver", "usr/lib/x86_64-linux-gnu"),
        ("/home/kubernetes/bin/nvidia", "lib64"),
    ],
)
def test_the_loader_finds_libnvidia_ml_in_each_layout(helm: Helm, tmp_path: Path, root: str, lib_dir: str) -> None:
    driver_root, run = tmp_path / "driver-root", tmp_path / "run"
    (driver_root / lib_dir).mkdir(parents=True)
    (driver_root / lib_dir / "libnvidia-ml.so.580.95.05").write_text("")
    (driver_root / lib_dir / "libnvidia-ml.so.1").symlink_to("libnvidia-ml.so.580.95.05")
    script = loader(helm, root).replace("/driver-root", str(driver_root)).replace("/run/dra-gpu", str(run))
    script = script.replace("exec dra-gpu-kubelet-plugin", "exec echo started")
    done = subprocess.run(["/bin/sh", "-ec", script], capture_output=True, text=True, check=False)
    assert (0, "started\n") == (done.returncode, done.stdout), done.stderr
    assert driver_root / lib_dir / "libnvidia-ml.so.1" == Path((run / "nvml/libnvidia-ml.so.1").readlink())


def test_the_loader_without_libnvidia_ml_names_the_host_path_and_stops(helm: Helm, tmp_path: Path) -> None:
    (tmp_path / "driver-root").mkdir()
    script = loader(helm, "/home/kubernetes/bin/nvidia").replace("/driver-root", str(tmp_path / "driver-root"))
    done = subprocess.run(
        ["/bin/sh", "-ec", script.replace("/run/dra-gpu", str(tmp_path / "run"))], capture_output=True, text=True
    )
    assert 1 == done.returncode
    assert "libnvidia-ml.so.1 not found under the driver root (host path /home/kubernetes/bin/nvidia)" in done.stderr
