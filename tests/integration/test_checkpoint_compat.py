"""Checkpoint compatibility with the previous release, both ways, with both releases as real plugin processes.

The previous release is the commit in ``tests/integration/PREVIOUS_RELEASE`` (bumped at each
release), extracted with ``git archive`` and run as ``python -m kubelet_plugin.main`` from that
tree with this checkout's venv (``PluginProcess.start(code=...)``). Both releases serve the same
plugin, CDI and fake-GPU directories (dynamic MIG on fake H100s, whose simulator state outlives
a process as a real GPU's does), in turn: previous → this checkout → previous. This proves the
upgrade rule written in ``dra_driver.core.checkpoint``:

* upgrade: claims the previous release prepared (a full GPU, a carved MIG slice, time-slicing,
  MPS) are answered again by this checkout with the same CDI ids and nothing re-done, their
  checkpoint entries are kept, and its unprepare cleans them up;
* downgrade: the previous release reads what this checkout wrote, with unknown additive fields
  added at every level (what a later additive change looks like), answers the same and cleans
  up; and both releases refuse a checkpoint whose apiVersion is newer than they know, leaving the
  file, the CDI specs, the MIG instances and the MPS daemons exactly as they were.

Collected by ``make test`` (pytest, with the API server of ``conftest.py``). A clone without the
previous release's commit (a shallow clone) fails with how to fetch it: it never skips.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dra_driver.core.checkpoint import API_VERSION, KNOWN_VERSIONS
from dra_driver.mig_backends.sim import load_instances, load_modes
from dra_driver.sharing_backends.sim import read_sharing_state
from dra_driver.sources.fake import FakeGpuSource
from testkit.claimdata import DRIVER
from testkit.claims import create_allocated_claim
from testkit.cluster import LocalCluster
from testkit.plugin_process import ROOT, PluginProcess

RELEASE_FILE = Path(__file__).with_name("PREVIOUS_RELEASE")
GPUS = FakeGpuSource("h100x8", "node-a").gpus()
ARGS = ("--mig", "dynamic", "--fake-mig-latency", "zero", "--gc-interval", "0")
Ref = tuple[str, str, str]


def previous_release_commit() -> str:
    """The one commit ``PREVIOUS_RELEASE`` names (comment lines aside)."""
    lines = [ln.strip() for ln in RELEASE_FILE.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert 1 == len(lines) and re.fullmatch(r"[0-9a-f]{40}", lines[0]), f"{RELEASE_FILE} must name one full commit hash"
    return lines[0]


def git(*args: str) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, timeout=120, check=False)
    except FileNotFoundError:
        pytest.fail("git is not installed: the checkpoint compatibility test reads the previous release from git history")


def missing_dependencies(pyproject: str) -> list[str]:
    """The requirements in a ``pyproject.toml``'s ``[project] dependencies`` with no installed distribution."""
    missing = []
    for requirement in tomllib.loads(pyproject)["project"]["dependencies"]:
        dist = re.split(r"[\s\[<>=!~;@]", requirement.strip(), maxsplit=1)[0]
        try:
            importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            missing.append(requirement.strip())
    return missing


def test_the_dependency_check_names_what_is_not_installed() -> None:
    declared = '[project]\ndependencies = ["pytest>=1", "no-such-dist-dra-gpu==1.0", "PyYAML[extra]==6"]\n'
    assert ["no-such-dist-dra-gpu==1.0"] == missing_dependencies(declared)


@pytest.fixture(scope="module")
def previous_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous release's source tree, extracted from git history (read-only git use)."""
    commit = previous_release_commit()
    repo = git("rev-parse", "--git-dir")
    if repo.returncode != 0:
        pytest.fail(
            f"git cannot read {ROOT} as a clone ({repo.stderr.decode().strip()}): the checkpoint compatibility test runs "
            f"the previous release's code ({commit}, tests/integration/PREVIOUS_RELEASE) from its history; run it in a clone",
            pytrace=False,
        )
    if git("cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        shallow = git("rev-parse", "--is-shallow-repository").stdout.decode().strip() == "true"
        pytest.fail(
            f"the previous release's commit {commit} (tests/integration/PREVIOUS_RELEASE) is not in this clone"
            + (" (a shallow clone)" if shallow else "")
            + ": the checkpoint compatibility test runs that release's code; fetch the history with "
            "`git fetch --unshallow` (or clone without --depth) and run it again",
            pytrace=False,
        )
    missing = missing_dependencies(git("show", f"{commit}:pyproject.toml").stdout.decode())
    if missing:
        pytest.fail(
            f"the previous release ({commit}) declares dependencies this venv does not have: {', '.join(missing)}; "
            "add them to the `previous-release` dependency group in pyproject.toml (make venv installs it)",
            pytrace=False,
        )
    archive = git("archive", "--format=tar", commit)
    assert 0 == archive.returncode, archive.stderr.decode()
    tree = tmp_path_factory.mktemp("previous-release")
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, capture_output=True, timeout=120, check=True)
    # What PluginProcess.start(code=tree) does: the tree is the working directory and PYTHONPATH,
    # so the previous release's packages are the ones imported, not this checkout's editable install.
    where = subprocess.run(
        [sys.executable, "-c", "import kubelet_plugin.main, dra_driver.core.checkpoint as c; print(c.__file__)"],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert Path(where.stdout.strip()).is_relative_to(tree), where.stdout
    return tree


@pytest.fixture
def node(tmp_path: Path, apiserver: LocalCluster) -> Iterator[PluginProcess]:
    """One node's directories, served in turn by either release (never both at once)."""
    p = PluginProcess(tmp_path, kubeconfig=apiserver.kubeconfig, extra_args=ARGS)
    yield p
    p.stop()


def name() -> str:
    return f"compat-{uuid.uuid4().hex[:8]}"


def gpu_config(sharing: dict[str, Any]) -> list[dict[str, Any]]:
    params = {"apiVersion": "resource.dra-gpu.dev/v1alpha1", "kind": "GpuConfig", "sharing": sharing}
    return [{"source": "FromClaim", "requests": [], "opaque": {"driver": DRIVER, "parameters": params}}]


def claims_of_every_kind(cluster: LocalCluster) -> dict[str, Ref]:
    """A full GPU, a dynamic MIG slice (carved at prepare), a time-sliced GPU and an MPS GPU."""
    return {
        "full": create_allocated_claim(cluster, name=name(), devices=["gpu-2"]),
        "mig": create_allocated_claim(cluster, name=name(), devices=["gpu-0-mig-1g10gb-6"]),
        "timeslice": create_allocated_claim(
            cluster,
            name=name(),
            devices=["gpu-3"],
            config=gpu_config({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}),
        ),
        "mps": create_allocated_claim(
            cluster,
            name=name(),
            devices=["gpu-4"],
            config=gpu_config({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50}}),
        ),
    }


def answers(p: PluginProcess, refs: list[Ref]) -> dict[str, list[tuple[list[str], str, str, list[str]]]]:
    """Prepare ``refs``; each claim's devices as answered (request names, pool, device, CDI ids). Fails on any error."""
    resp = p.prepare(refs)
    errors = {uid: resp.claims[uid].error for _, uid, _ in refs if resp.claims[uid].error}
    assert {} == errors
    return {
        uid: [(list(d.request_names), d.pool_name, d.device_name, list(d.cdi_device_ids)) for d in resp.claims[uid].devices]
        for _, uid, _ in refs
    }


def unprepare_ok(p: PluginProcess, refs: list[Ref]) -> None:
    resp = p.unprepare(refs)
    assert {uid: "" for _, uid, _ in refs} == {uid: resp.claims[uid].error for _, uid, _ in refs}


def cdi_specs(p: PluginProcess) -> dict[str, bytes]:
    return {f: (p.cdi / f).read_bytes() for f in p.cdi_files()}


def cdi_file(uid: str) -> str:
    return f"k8s.{DRIVER}-claim_{uid}.json"


def gpu_side(p: PluginProcess) -> tuple[Any, ...]:
    """What the fake GPUs hold: MIG instances and modes, time slices, MPS daemons."""
    sim = p.sim_state
    sharing = read_sharing_state(p.plugin_dir / "fake-gpus" / "sharing-state.json")
    return (
        load_instances(sim) if sim.exists() else {},
        load_modes(sim) if sim.exists() else {},
        sharing["timeSlices"],
        sharing["mps"],
    )


def checkpoint_doc(p: PluginProcess) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((p.plugin_dir / "checkpoint.json").read_bytes())
    return doc


def seal(doc: dict[str, Any]) -> bytes:
    """The document with its checksum recomputed as the format defines it (sha256 of canonical ``data``)."""
    canonical = json.dumps(doc["data"], sort_keys=True, separators=(",", ":")).encode()
    return json.dumps({**doc, "checksum": "sha256:" + hashlib.sha256(canonical).hexdigest()}, indent=1).encode()


def assert_kept(old: Any, new: Any, where: str = "entry") -> None:
    """Everything ``old`` holds is in ``new`` unchanged; ``new`` may add fields (the additive rule)."""
    if isinstance(old, dict):
        assert isinstance(new, dict), f"{where}: {new!r} is not an object"
        for key, value in old.items():
            assert key in new, f"{where}.{key} was dropped"
            assert_kept(value, new[key], f"{where}.{key}")
    elif isinstance(old, list):
        assert isinstance(new, list) and len(old) == len(new), f"{where}: {old!r} became {new!r}"
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            assert_kept(a, b, f"{where}[{i}]")
    else:
        assert old == new, f"{where}: {old!r} became {new!r}"


def with_unknown_fields(doc: dict[str, Any]) -> dict[str, Any]:
    """The document with a field no release knows at every level, as a later additive change adds one."""
    doc = json.loads(json.dumps(doc))
    doc["futureTopLevel"] = {"x": 1}
    doc["data"]["futureNodeField"] = ["y"]
    for entry in doc["data"]["claims"].values():
        entry["futureClaimField"] = {"nested": True}
        for device in entry["devices"]:
            device["futureDeviceField"] = 7
            if device.get("mig"):
                device["mig"]["futureMigField"] = "z"
                device["mig"]["placement"]["futurePlacementField"] = 0
    return doc


class Run:
    """One start of the plugin from one tree; what it logged, and how it ended."""

    def __init__(self, p: PluginProcess, code: Path | None) -> None:
        self.p = p
        self.code = code
        self.first = len(p.logs()) if p.log.exists() else 0

    def __enter__(self) -> Run:
        self.p.start(code=self.code)
        assert self.p.proc is not None
        assert Path(f"/proc/{self.p.proc.pid}/cwd").resolve() == (self.code or ROOT).resolve()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        code = self.p.stop()
        if exc_type is None:  # a clean stop: SIGTERM honoured, exit code 0
            assert 0 == code, self.p.log.read_text()[-3000:]

    def events(self) -> list[str]:
        return [str(e.get("event")) for e in self.p.logs()[self.first :]]

    def notices(self) -> set[str]:
        """The checkpoint notices (Events) this run raised, by reason."""
        return {str(e.get("reason")) for e in self.p.logs()[self.first :] if e.get("event") == "checkpoint_notice"}


def test_claims_prepared_by_the_previous_release_survive_the_upgrade_and_the_downgrade_back(
    node: PluginProcess, previous_release: Path, apiserver: LocalCluster
) -> None:
    refs = claims_of_every_kind(apiserver)
    every = list(refs.values())
    uid = {k: r[1] for k, r in refs.items()}

    # The previous release prepares one claim of every kind.
    with Run(node, previous_release):
        before = answers(node, every)
    written_by_previous = checkpoint_doc(node)
    previous_version = written_by_previous["apiVersion"]
    old_claims = written_by_previous["data"]["claims"]
    assert {"PrepareCompleted"} == {old_claims[u]["state"] for u in uid.values()}
    assert old_claims[uid["mig"]]["devices"][0]["mig"]["migUUID"].startswith("MIG-")  # the checkpoint has MIG records
    specs, gpus = cdi_specs(node), gpu_side(node)
    assert sorted(cdi_file(u) for u in uid.values()) == sorted(specs)
    assert [("1g.10gb", 6)] == [(i.profile_name, i.placement.start) for i in gpus[0][GPUS[0].uuid]]
    assert {GPUS[3].uuid: "Long"} == gpus[2] and 1 == len(gpus[3])

    # Upgrade: this checkout answers the same claims again, redoing nothing, and keeps every entry.
    later = create_allocated_claim(apiserver, name=name(), devices=["gpu-1-mig-3g40gb-4"])
    with Run(node, None) as upgraded:
        assert before == answers(node, every)
        assert (specs, gpus) == (cdi_specs(node), gpu_side(node))
        assert 4 == upgraded.events().count("claim_already_prepared")
        later_answer = answers(node, [later])  # a claim only this checkout prepared, for the way back
        written_by_new = checkpoint_doc(node)
        assert previous_version == written_by_new["apiVersion"], (
            "the checkpoint apiVersion changed since the previous release: an incompatible change, which the previous "
            "release must refuse (the newer-apiVersion test below); make this test's downgrade expect that refusal"
        )
        for u in uid.values():
            assert_kept(old_claims[u], written_by_new["data"]["claims"][u], f"claims[{u}]")
        # and its unprepare cleans up what the previous release prepared
        unprepare_ok(node, [refs["mig"], refs["timeslice"]])
        after_cleanup = checkpoint_doc(node)["data"]["claims"]
        assert {uid["mig"], uid["timeslice"]}.isdisjoint(after_cleanup)
        assert {cdi_file(uid["mig"]), cdi_file(uid["timeslice"])}.isdisjoint(node.cdi_files())
        instances, modes, time_slices, _ = gpu_side(node)
        assert [] == instances[GPUS[0].uuid] and not modes[GPUS[0].uuid].current
        assert {} == time_slices

    # Downgrade: the previous release reads this checkout's checkpoint, unknown additive fields and all.
    kept = [refs["full"], refs["mps"], later]
    (node.plugin_dir / "checkpoint.json").write_bytes(seal(with_unknown_fields(checkpoint_doc(node))))
    specs, gpus = cdi_specs(node), gpu_side(node)
    with Run(node, previous_release) as downgraded:
        assert {**{u: before[u] for u in (uid["full"], uid["mps"])}, **later_answer} == answers(node, kept)
        assert (specs, gpus) == (cdi_specs(node), gpu_side(node))
        assert 3 == downgraded.events().count("claim_already_prepared")
        assert set() == downgraded.notices()  # read as it is: not moved aside, not rebuilt
        unprepare_ok(node, kept)
        assert {} == checkpoint_doc(node)["data"]["claims"]
        assert [] == node.cdi_files()
        instances, modes, time_slices, mps = gpu_side(node)
        assert {} == {g: i for g, i in instances.items() if i}
        assert set() == {g for g, m in modes.items() if m.current}
        assert ({}, {}) == (time_slices, mps)


def test_a_checkpoint_with_a_newer_api_version_is_refused_by_both_releases_and_left_as_it_is(
    node: PluginProcess, previous_release: Path, apiserver: LocalCluster
) -> None:
    refs = claims_of_every_kind(apiserver)
    every = list(refs.values())
    with Run(node, None):
        before = answers(node, every)
    checkpoint = node.plugin_dir / "checkpoint.json"
    v1 = checkpoint.read_bytes()
    doc = checkpoint_doc(node)
    group = API_VERSION.rsplit("/", 1)[0]
    next_version = 1 + max(int(v.rsplit("/v", 1)[1]) for v in KNOWN_VERSIONS)  # newer than either release knows
    # An incompatible layout the next version might have: claims moved, another checksum.
    newer = {
        "apiVersion": f"{group}/v{next_version}",
        "checksum": "sha512:" + hashlib.sha512(v1).hexdigest(),
        "data": {"nodeBootID": doc["data"]["nodeBootID"], "preparedClaims": list(doc["data"]["claims"].items())},
    }
    checkpoint.write_bytes(json.dumps(newer).encode())
    files = {f.name: f.read_bytes() for f in node.plugin_dir.iterdir() if f.is_file() and f.name.startswith("checkpoint")}
    specs, gpus = cdi_specs(node), gpu_side(node)
    assert 4 == len(specs) and gpus[0][GPUS[0].uuid] and gpus[3]

    unknown = create_allocated_claim(apiserver, name=name(), devices=["gpu-6"])
    for code in (previous_release, None):  # the previous release (a downgrade) and this checkout alike
        with Run(node, code) as refusing:
            prepared = node.prepare([*every, unknown])
            unprepared = node.unprepare(every)
            events, notices = refusing.events(), refusing.notices()
        assert all("roll forward" in prepared.claims[r[1]].error for r in [*every, unknown]), prepared
        assert all("roll forward" in unprepared.claims[r[1]].error for r in every), unprepared
        assert {"CheckpointTooNew"} == notices
        assert {"plugin_refusing", "plugin_started"} <= set(events)  # up and answering (no crash loop), publishing nothing
        assert "Traceback" not in node.log.read_text()
        after = {f.name: f.read_bytes() for f in node.plugin_dir.iterdir() if f.is_file() and f.name.startswith("checkpoint")}
        assert files == after  # not rewritten, not moved aside, no corrupt-* copy
        assert (specs, gpus) == (cdi_specs(node), gpu_side(node))  # no CDI spec, MIG instance or MPS daemon touched

    # Rolled forward (here: the file as this checkout wrote it), every claim is still there.
    checkpoint.write_bytes(v1)
    with Run(node, None):
        assert before == answers(node, every)
        unprepare_ok(node, every)
        assert [] == node.cdi_files()
