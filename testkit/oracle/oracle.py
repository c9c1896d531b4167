"""The Go oracle (``testkit/go/cmd/celdiff``) and dra-gpu's Python answers to the same cases, side by side.

``Celdiff`` keeps one celdiff process for the whole test session and asks it one JSON line at a
time (the program answers each line as it comes). ``python_selector`` and ``python_allocate``
compute dra-gpu's answers in exactly the shape celdiff prints, so a test compares dicts; both follow
the rules of one Kubernetes release (``minor``; default: ``testkit/go/K8S_VERSION``'s), as each celdiff
answers for the release it is built for, at the case's ``featureGates`` (kube-scheduler's
``--feature-gates``; none: the release's defaults).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from dra_driver.core.quantity import parse_quantity
from dra_driver.schedsim.allocator import AllocatedState, NodeAllocator, gather_pools
from dra_driver.schedsim.allocator.model import claim_key
from dra_driver.schedsim.cel import CelCompileError, CelRuntimeError, compile_selector
from dra_driver.schedsim.gates import parse_feature_gates
from dra_driver.schedsim.rules import Rules, minor_of, rules_for
from testkit.cluster import GO_DIR, K8S_VERSION, bin_dir


def release_rules(minor: int | None = None, feature_gates: str = "") -> Rules:
    """The simulator's rules for Kubernetes 1.<minor> (None: ``testkit/go/K8S_VERSION``) at ``feature_gates``."""
    gates = parse_feature_gates(feature_gates) if feature_gates else None
    return rules_for(minor_of(K8S_VERSION) if minor is None else minor, gates)


class OracleMissing(RuntimeError):
    """celdiff is not built."""


class Celdiff:
    """One long-lived celdiff process; :meth:`ask` sends a case and returns its answer."""

    def __init__(self, version: str = K8S_VERSION) -> None:
        """The oracle of ``version`` (its scheduler's allocator with that release's default gates)."""
        path = bin_dir(version) / "celdiff"
        if not os.access(path, os.X_OK):
            env = "" if version == K8S_VERSION else f"DRA_GPU_K8S_VERSION={version} "
            raise OracleMissing(f"{path} is missing: build it with {env}{GO_DIR / 'build.sh'} celdiff (make k8s does)")
        self.path = path
        self._proc = subprocess.Popen(
            [str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, encoding="utf-8", bufsize=1 << 16
        )

    def ask(self, case: Mapping[str, Any]) -> dict[str, Any]:
        """The Go answer to one case."""
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps(case, separators=(",", ":")) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"celdiff exited with {self._proc.wait()}")
        answer: dict[str, Any] = json.loads(line)
        if answer.get("error") == "input":
            raise ValueError(f"celdiff rejected the case: {answer['message']}\n{json.dumps(case)[:2000]}")
        return answer

    def close(self) -> None:
        """End the process (closing stdin ends it)."""
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc.wait(timeout=30)
        if self._proc.stdout is not None:
            self._proc.stdout.close()


def selector_case(driver: str, device: Mapping[str, Any], expression: str) -> dict[str, Any]:
    """A celdiff ``selector`` case."""
    return {"kind": "selector", "driver": driver, "device": device, "expression": expression}


def python_selector(driver: str, device: Mapping[str, Any], expression: str, *, minor: int | None = None) -> dict[str, Any]:
    """dra-gpu's answer to a selector case, shaped like celdiff's, in Kubernetes 1.<minor>'s environment."""
    try:
        sel = compile_selector(expression, release_rules(minor))
    except CelCompileError as err:
        return {"error": "compile", "message": err.message}
    try:
        result = sel.matches(device, driver=driver)
    except CelRuntimeError as err:
        return {"error": "runtime", "message": err.message}
    return {"result": result}


def exact_quantities(answer: dict[str, Any]) -> dict[str, Any]:
    """``answer`` with consumed capacities as exact values (Go prints canonical quantities)."""
    for devs in answer.get("claims") or []:
        for d in devs:
            if "consumedCapacity" in d:
                d["consumedCapacity"] = {k: str(parse_quantity(v).fraction()) for k, v in d["consumedCapacity"].items()}
    return answer


def allocate_case(
    *,
    node: str,
    slices: Sequence[Mapping[str, Any]],
    classes: Sequence[Mapping[str, Any]],
    claims: Sequence[Mapping[str, Any]],
    allocated: Sequence[Mapping[str, Any]] = (),
    node_labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A celdiff ``allocate`` case."""
    return {
        "kind": "allocate",
        "node": node,
        "nodeLabels": dict(node_labels or {}),
        "slices": list(slices),
        "classes": list(classes),
        "claims": list(claims),
        "allocated": list(allocated),
    }


def python_allocate(case: Mapping[str, Any], *, minor: int | None = None) -> dict[str, Any]:
    """dra-gpu's simulated allocation for an ``allocate`` case, shaped like celdiff's answer, by Kubernetes 1.<minor>'s rules."""
    rules = release_rules(minor, case.get("featureGates", ""))
    classes = {str(c["metadata"]["name"]): c for c in case["classes"]}
    labels = case.get("nodeLabels") or {}
    pools = gather_pools(case["slices"], case["node"], labels, rules)
    state = AllocatedState.from_claims(case["allocated"])
    outcome = NodeAllocator(case["claims"], classes, pools, state, case["node"], labels=labels, rules=rules).run()
    if outcome.error is not None:
        return {"outcome": "error", "class": "abort", "message": outcome.error}
    if outcome.results is None:
        if outcome.reason == "invalid resource pools were encountered":
            return {"outcome": "error", "class": "node", "message": outcome.reason}
        return {"outcome": "unsatisfiable"}
    claims: list[list[dict[str, Any]]] = []
    for claim in case["claims"]:
        key = claim_key(claim)
        devs = []
        for r in outcome.results:
            if r.claim != key:
                continue
            d: dict[str, Any] = {"request": r.request, "driver": r.driver, "pool": r.pool, "device": r.device}
            if r.admin_access:
                d["adminAccess"] = True
            if r.share_id:
                d["shared"] = True
            if r.consumed:
                d["consumedCapacity"] = {k: str(v.fraction()) for k, v in r.consumed.items()}
            devs.append(d)
        claims.append(devs)
    return {"outcome": "allocated", "claims": claims}
