"""Every example runs: the docs' YAML on a real API server, the demo's pods scheduled, the docs'
live ``dra-gpu`` commands against a cluster.

What is found (testkit/docs_examples.py, nothing listed here): every ```yaml fence holding
``apiVersion:`` in README.md, docs/**/*.md and demo/**/*.md, and every demo/**/*.yaml. Each object
is applied to a real kube-apiserver with a server-side dry run (server-side apply, ``dryRun=All``,
``force=true``: ``kubectl apply --server-side --dry-run=server --force-conflicts``), so the API
server's validation and admission judge it; its resource is found through API discovery, so a kind
the server does not serve fails. The namespaces the objects name are created first, the
chart's cluster objects (its DeviceClasses gpu., mig., mig-<profile>. and shared.gpu.dra-gpu.dev,
RBAC, policies) are installed with Helm as a user would, and Kueue's CRDs (testkit/go/kueue/build.sh
copies them from its module) for demo/kueue/.

Convention (docs/development/docs-conventions.md): a block that is not a complete object on its
own (a part of one, a kubelet or Helm config) carries ``<!-- example: fragment -->`` on the line
before its fence; those, and only those, are skipped, and counted.

Scheduling: a demo manifest schedules when it holds a Pod or a pod template. The e2e tests that
apply a demo file name it (a string ``"<file>.yaml"`` in their code; found by parsing e2e/test_*.py,
docstrings aside): test_scheduling_selectors (gpu-h100, gpu-40gi, gpu-no-mig, gpu-driver-570,
two-gpus, shared-claim, unsatisfiable, missing-attribute), test_mig_scheduling (mig-*),
test_sharing_scheduling (shared-claim, mps-claim, consumable-20gi), test_topology_scheduling
(gpu-with-nic-same-numa), test_extended_resources (device-plugin-style-pod, team-quota),
test_installed (its WORKLOADS). A demo file no test names (health-trainer.yaml when this was
written: only ``make demo``, which make test does not run, applies it) is applied here, for real,
on a node publishing 8 fake H100s, and each of its pods must be bound with its claims allocated.

Commands: the docs' ``dra-gpu explain NAME`` commands (live, testkit.docs_examples.needs) run against
this cluster with its kubeconfig, after the manifest that defines NAME is applied; their output must
have the shape the doc shows. The other commands that need more than an API server (a GPU, a node's
plugin dir, running plugins' metrics) are listed with the reason; tests/unit/docs/test_doc_commands.py
checks that every command parses and runs the ones that need no cluster.
"""

from __future__ import annotations

import ast
import shlex
import time
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.cli.main import build_parser, inventory_slices
from dra_driver.core.driver import DEFAULT_DRIVER_NAME

# The e2e harness: imported here only, so that moving it is one edit.
from testkit.cluster import ApiError, LocalCluster
from testkit.docs_examples import (
    REPO,
    ShownCommand,
    cli_env,
    demo_manifests,
    exited_ok,
    needs,
    output_shape_mismatch,
    rel,
    run_shell,
    shown_commands,
    workdir_with_repo,
    yaml_examples,
)
from testkit.helm_cli import Helm
from testkit.kueue import install_crds

NODE = "node-a"
CHART_SETS = ("kubeletPlugin.enabled=false", "mig.strategy=static", "sharing.consumable=true")
MANAGER = "dra-gpu-doc-examples"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
THIS = Path(__file__).resolve()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """API server, scheduler, controller-manager; the chart's cluster objects; node-a publishing 8 fake H100s."""
    with LocalCluster(with_scheduler=True, with_controller_manager=True, log_dir=tmp_path_factory.mktemp("docs-logs")) as c:
        Helm.built(tmp_path_factory.mktemp("helm-home")).install(c, *CHART_SETS)
        install_crds(c)  # demo/kueue/ and docs/guides/team-quotas-kueue.md: ClusterQueue, LocalQueue, ...
        c.add_node(NODE)
        for s in inventory_slices(fake_gpus="h100x8", node_name=NODE, driver=DEFAULT_DRIVER_NAME):
            c.api("POST", SLICES, s)
        yield c


# -- the API server's view of an object ---------------------------------------------------


@cache
def _discovery(c: LocalCluster, api_version: str) -> tuple[dict[str, Any], ...]:
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    try:
        return tuple(r for r in c.api("GET", base)["resources"] if "/" not in r["name"])
    except ApiError as err:
        if err.status == 404:
            return ()
        raise


def collection(c: LocalCluster, obj: dict[str, Any]) -> str:
    """The REST collection of an object, found by discovery; ValueError when the server serves no such kind."""
    api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
    found = [r for r in _discovery(c, api_version) if r["kind"] == kind]
    if not found:
        raise ValueError(f"the API server serves no {kind or '(no kind)'} in {api_version or '(no apiVersion)'}")
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    ns = f"/namespaces/{namespace_of(obj)}" if found[0]["namespaced"] else ""
    return f"{base}{ns}/{found[0]['name']}"


def namespace_of(obj: dict[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("namespace") or "default")


def ensure_namespaces(c: LocalCluster, objs: list[dict[str, Any]]) -> None:
    """Create (for real) every namespace the objects live in, as a reader's cluster has them."""
    for ns in sorted({namespace_of(o) for o in objs} | {o["metadata"]["name"] for o in objs if o.get("kind") == "Namespace"}):
        try:
            c.api("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        except ApiError as err:
            if err.status != 409:
                raise


def dry_run(c: LocalCluster, obj: dict[str, Any]) -> None:
    """Server-side apply with dryRun=All (POST for a generateName object); ApiError/ValueError when refused."""
    path = collection(c, obj)
    name = obj.get("metadata", {}).get("name")
    if name:
        query = f"dryRun=All&fieldManager={MANAGER}&force=true"
        c.api("PATCH", f"{path}/{name}?{query}", obj, "application/apply-patch+yaml")
    else:
        c.api("POST", f"{path}?dryRun=All&fieldManager={MANAGER}", obj)


def label(obj: Any) -> str:
    """Kind namespace/name of an object, for messages (a block that is no object: its first keys)."""
    if not isinstance(obj, dict) or "metadata" not in obj:
        return f"a document with keys {list(obj)[:4] if isinstance(obj, dict) else type(obj).__name__}"
    return f"{obj.get('kind')} {namespace_of(obj)}/{obj['metadata'].get('name')}"


def test_every_yaml_example_is_accepted_by_the_api_server(cluster: LocalCluster) -> None:
    examples = yaml_examples()
    fragments = [e for e in examples if e.fragment]
    problems: list[str] = []
    applied: list[dict[str, Any]] = []
    parsed = []
    for ex in (e for e in examples if not e.fragment):
        try:
            parsed.append((ex, ex.objects()))
        except yaml.YAMLError as err:
            problems.append(f"{ex.where}: not YAML (mark a partial block <!-- example: fragment -->): {err}")
    ensure_namespaces(cluster, [o for _, objs in parsed for o in objs if isinstance(o, dict)])
    for ex, objs in parsed:
        for obj in objs:
            try:
                if not isinstance(obj, dict) or "metadata" not in obj:
                    raise ValueError("not a Kubernetes object (no metadata): mark the block <!-- example: fragment -->")
                dry_run(cluster, obj)
                applied.append(obj)
            except (ApiError, ValueError) as err:
                problems.append(f"{ex.where}: {label(obj)}: {err}")
    refused = {p.split(": ", 1)[0] for p in problems}
    n_demo = len(demo_manifests())
    print(
        f"\n{len(examples)} YAML examples ({len(examples) - n_demo} in Markdown, {n_demo} demo manifests): "
        f"{len(parsed) - len(refused)} accepted whole by the server-side dry run ({len(applied)} objects), "
        f"{len(refused)} refused, {len(fragments)} fragments skipped: {', '.join(e.where for e in fragments) or '-'}"
    )
    assert applied, "no YAML example found: the discovery is broken"
    assert not problems, "examples the API server refuses:\n" + "\n".join(problems)


# -- the demo's pods, scheduled -------------------------------------------------------------


def schedules(obj: dict[str, Any]) -> bool:
    return obj.get("kind") == "Pod" or "spec" in obj.get("spec", {}).get("template", {})


def covering_tests(name: str) -> list[str]:
    """The e2e test modules (not this one) whose code (docstrings aside) names the file ``name``."""
    found = []
    for path in sorted((REPO / "e2e").rglob("test_*.py")):
        if path.resolve() == THIS:
            continue
        tree = ast.parse(path.read_text())
        bare = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
        strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and id(n) not in bare}
        if name in strings:
            found.append(path.stem)
    return found


def pods_of(c: LocalCluster, obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The pods a workload object made (a Pod: itself), as the API server holds them now."""
    ns, name = namespace_of(obj), obj["metadata"]["name"]
    if obj["kind"] == "Pod":
        return [c.api("GET", f"/api/v1/namespaces/{ns}/pods/{name}")]
    match = obj["spec"].get("selector", {}).get("matchLabels") or {"batch.kubernetes.io/job-name": name}
    selector = ",".join(f"{k}={v}" for k, v in sorted(match.items()))
    items: list[dict[str, Any]] = c.api("GET", f"/api/v1/namespaces/{ns}/pods?labelSelector={selector}")["items"]
    return items


def unscheduled(c: LocalCluster, obj: dict[str, Any]) -> list[str]:
    """What is not yet bound/allocated among the object's pods (empty: all of them are)."""
    pods = pods_of(c, obj)
    want = 1 if obj["kind"] == "Pod" else int(obj["spec"].get("replicas", 1))
    missing = [f"{label(obj)}: {len(pods)} of {want} pods"] if len(pods) < want else []
    for p in pods:
        if not p["spec"].get("nodeName"):
            missing.append(f"pod {p['metadata']['name']} not bound: {p['status'].get('conditions')}")
        for st in p["status"].get("resourceClaimStatuses", []):
            claim = c.api(
                "GET", f"/apis/resource.k8s.io/v1/namespaces/{namespace_of(p)}/resourceclaims/{st['resourceClaimName']}"
            )
            if "allocation" not in claim.get("status", {}):
                missing.append(f"claim {st['resourceClaimName']} of pod {p['metadata']['name']} not allocated")
    return missing


def apply_for_real(c: LocalCluster, objs: list[dict[str, Any]]) -> None:
    ensure_namespaces(c, objs)
    for obj in objs:
        try:
            c.api("POST", collection(c, obj), obj)
        except ApiError as err:
            if err.status != 409:
                raise


def test_every_demo_workload_is_scheduled_here_or_by_an_e2e_test_that_names_it(cluster: LocalCluster) -> None:
    workloads = [p for p in demo_manifests() if any(schedules(o) for o in yaml.safe_load_all(p.read_text()) if o)]
    covered = {rel(p): covering_tests(p.name) for p in workloads}
    here = [p for p in workloads if not covered[rel(p)]]
    for p in here:
        apply_for_real(cluster, [o for o in yaml.safe_load_all(p.read_text()) if o])
    deadline, missing = time.monotonic() + 90, ["(not checked)"]
    while missing and time.monotonic() < deadline:
        missing = [
            m for p in here for o in yaml.safe_load_all(p.read_text()) if o and schedules(o) for m in unscheduled(cluster, o)
        ]
        time.sleep(0.5 if missing else 0)
    print(f"\n{len(workloads)} demo manifests schedule pods; scheduled here: {', '.join(rel(p) for p in here) or '-'}")
    print("\n".join(f"  {f}: {', '.join(t)}" for f, t in covered.items() if t))
    assert workloads, "no demo manifest with a pod: the discovery is broken"
    assert not missing, (
        "demo workloads no e2e test names were not scheduled here within 90s "
        "(make them schedulable on 8 H100s, or cover them in an e2e test that applies the file):\n" + "\n".join(missing)
    )


# -- the docs' live commands ---------------------------------------------------------------


def defining_manifest(kind: str, name: str, ns: str) -> list[dict[str, Any]] | None:
    """The objects of the first example that defines ``kind`` ns/name (demo manifests first)."""
    for ex in sorted(yaml_examples(), key=lambda e: not e.where.startswith("demo/")):
        if ex.fragment:
            continue
        objs = ex.objects()
        if any(o.get("kind", "").lower() == kind and o["metadata"].get("name") == name and namespace_of(o) == ns for o in objs):
            return objs
    return None


def run_live_explain(c: LocalCluster, cmd: ShownCommand, tmp: Path) -> str | None:
    """Run a live ``explain NAME`` against ``c``; what is wrong, or None."""
    args = build_parser().parse_args(list(cmd.args))
    kind, _, name = str(args.target or "").rpartition("/")
    objs = defining_manifest(kind or "pod", name, args.namespace)
    if objs is None:
        return f"no example in the docs or demo/ defines {kind or 'pod'} {args.namespace}/{name}"
    apply_for_real(c, objs)
    if (kind or "pod") == "pod":
        path = f"/api/v1/namespaces/{args.namespace}/pods/{name}"
        deadline = time.monotonic() + 60
        while not any(x["type"] == "PodScheduled" for x in c.api("GET", path)["status"].get("conditions", [])):
            assert time.monotonic() < deadline, f"pod {args.namespace}/{name} never tried by the scheduler"
            time.sleep(0.25)
    words = list(cmd.args)
    if "--kubeconfig" in words:
        del words[words.index("--kubeconfig") : words.index("--kubeconfig") + 2]
    line = shlex.join(["dra-gpu", *words, "--kubeconfig", str(c.kubeconfig)])
    out = run_shell(line, workdir_with_repo(tmp / "cwd"), cli_env(tmp / "env"))
    if not exited_ok(cmd, out.returncode) or name not in out.stdout:
        return f"`{line}` exited {out.returncode}:\n{out.stdout[-1500:]}\n{out.stderr[-1500:]}"
    return output_shape_mismatch(cmd.output, out.stdout)


def test_docs_live_commands_run_against_the_cluster(cluster: LocalCluster, tmp_path: Path) -> None:
    commands = [c for c in shown_commands() if needs(c)]
    live = [c for c in commands if not c.in_pod and c.args[:1] == ("explain",)]
    problems = [f"{c.where}: {why}" for n, c in enumerate(live) if (why := run_live_explain(cluster, c, tmp_path / str(n)))]
    rest = [f"{c.where}: dra-gpu {' '.join(c.args)}: {needs(c)}" for c in commands if c not in live]
    print(f"\n{len(commands)} doc commands need more than this machine: {len(live)} run here, {len(rest)} parse-only:")
    print("\n".join(rest))
    assert not problems, "\n".join(problems)
