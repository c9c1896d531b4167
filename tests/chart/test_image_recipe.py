"""The image recipe (deploy/container/Dockerfile) and its local builder (build-local.sh), without building.

The Dockerfile is the one recipe for the product image: Docker users build it, and
``deploy/container/build-local.sh`` builds the same file with buildah on a Debian minbase.
These checks are static and fast: the recipe copies every package the wheel is built from,
its base is the ``BASE_IMAGE`` build argument the script sets, and the script names the apt
package to install when a tool is missing. Building and running the image is what
``testkit/installed.py`` does.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from testkit.cluster import ClusterError
from testkit.runtime_node import find_runtime, runtime_version

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "deploy" / "container" / "Dockerfile"
BUILD_LOCAL = REPO / "deploy" / "container" / "build-local.sh"


def _instructions() -> list[tuple[str, list[str]]]:
    """The Dockerfile's instructions as (KEYWORD, shell-split arguments), continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        keyword, _, rest = stripped.partition(" ")
        out.append((keyword.upper(), shlex.split(rest)))
    return out


def _copy_sources() -> set[str]:
    """Every COPY source path (flags left out), without a trailing slash."""
    sources: set[str] = set()
    for keyword, args in _instructions():
        if keyword == "COPY":
            paths = [a for a in args if not a.startswith("--")]
            sources.update(p.rstrip("/") for p in paths[:-1])
    return sources


def _wheel_top_level_packages() -> set[str]:
    """The top-level packages setuptools' finder puts in the wheel (pyproject.toml's include patterns).

    Its patterns match dotted package names; a top-level package is a directory at the root with an
    ``__init__.py`` whose name matches one (subpackages ride along with their parent's COPY).
    """
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    include = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    return {
        d.name
        for d in REPO.iterdir()
        if (d / "__init__.py").is_file() and any(fnmatch.fnmatchcase(d.name, pattern) for pattern in include)
    }


def test_dockerfile_copies_every_package_of_the_wheel() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    packages = _wheel_top_level_packages()
    # The include patterns name top-level packages; each must exist, so the finder saw them all.
    patterns = {p.rstrip("*").rstrip(".") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert patterns == packages
    sources = _copy_sources()
    missing = packages - sources
    assert not missing, f"{DOCKERFILE} does not COPY {sorted(missing)}, which the wheel contains"
    # pip builds the wheel from pyproject.toml, and the metadata reads the readme it names.
    assert {"pyproject.toml", pyproject["project"]["readme"]} <= sources
    for source in sources:
        assert (REPO / source).exists(), f"COPY {source}: no such path in the repository"


def test_dockerignore_keeps_what_the_recipe_copies() -> None:
    ignored = {
        line.strip().rstrip("/")
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert not (_copy_sources() & ignored)
    assert {".git", ".venv", "e2e", "tests"} <= ignored


def test_from_uses_the_base_image_argument() -> None:
    instructions = _instructions()
    first_from = next(i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM")
    args_before = dict(a.partition("=")[::2] for k, args in instructions[:first_from] if k == "ARG" for a in args)
    assert "BASE_IMAGE" in args_before, "ARG BASE_IMAGE=... must come before FROM (build-local.sh sets it)"
    assert "bookworm" in args_before["BASE_IMAGE"], "the default base is Debian bookworm, as build-local.sh's"
    assert [args for keyword, args in instructions if keyword == "FROM"] == [["${BASE_IMAGE}"]]
    assert "BASE_IMAGE=" in BUILD_LOCAL.read_text()


def _limited_path(tmp_path: Path, extra: dict[str, str]) -> Path:
    """A directory with bash and a few coreutils, plus ``extra`` stub scripts: the script's only PATH."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("bash", "env", "dirname", "cat", "mkdir", "rm", "mktemp"):
        real = shutil.which(tool)
        assert real, tool
        (bindir / tool).symlink_to(real)
    for name, body in extra.items():
        stub = bindir / name
        stub.write_text(f"#!{bindir / 'bash'}\n{body}\n")
        stub.chmod(0o755)
    return bindir


@pytest.mark.parametrize(
    ("stubs", "missing"),
    [
        ({"mmdebstrap": "exit 0"}, ["buildah"]),
        ({}, ["mmdebstrap", "buildah"]),
    ],
)
def test_build_local_names_the_package_of_a_missing_tool(tmp_path: Path, stubs: dict[str, str], missing: list[str]) -> None:
    bindir = _limited_path(tmp_path, stubs)
    env = {"PATH": str(bindir), "HOME": str(tmp_path), "DRA_GPU_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run(
        [str(bindir / "bash"), str(BUILD_LOCAL)], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == len(missing), lines
    for line, tool in zip(lines, missing, strict=True):
        assert f"apt-get install -y {tool}" in line, line
    assert not (tmp_path / "cache").exists(), "nothing is made before the tools are there"


def test_build_local_is_executable() -> None:
    assert os.access(BUILD_LOCAL, os.X_OK)
    assert BUILD_LOCAL.read_text().startswith("#!/usr/bin/env bash\n")


def test_a_missing_runtime_names_the_script_that_builds_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without containerd in the cache, a runtime node fails at once naming testkit/go/runtime/build.sh."""
    monkeypatch.setenv("DRA_GPU_CACHE", str(tmp_path))
    with pytest.raises(ClusterError) as err:
        find_runtime()
    assert f"runtime-{runtime_version()}" in str(err.value)
    assert "Build it with: " in str(err.value) and str(REPO / "testkit" / "go" / "runtime" / "build.sh") in str(err.value)
    assert "containerd" in str(err.value)
