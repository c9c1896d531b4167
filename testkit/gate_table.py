"""A release's feature-gate table as its kube-scheduler computes it, from celdiff, for ``dra_driver.schedsim.gates``.

Callers: ``e2e/test_feature_gates.py`` (the check) and a person adding a release:
``python -m testkit.gate_table v1.38.0`` prints the release's lines for ``gates.TABLES_TEXT`` (the DRA
gates, DynamicResourceAllocation and what they depend on, with their versioned specs and
dependencies), and its other gates with their stage and their dependencies for ``gate_names.py``
(``_OTHERS`` and ``_DEPENDENCIES``), read from the release's celdiff
(``{"kind": "gates"}``, which evaluates the gates with the scheduler's own options and registry).
Test infrastructure only.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from dra_driver.schedsim.gate_names import STAGE_CODES
from dra_driver.schedsim.gates import Spec, spec_at
from testkit.cluster import K8S_VERSION
from testkit.oracle.oracle import Celdiff

SPECIAL = frozenset({"AllAlpha", "AllBeta"})


def is_table_gate(name: str) -> bool:
    """A gate of ``gates.TABLES`` itself (its dependencies join it)."""
    return name.startswith("DRA") or name == "DynamicResourceAllocation"


def minor_of_version(text: str) -> int:
    """31 for "1.31" or "v1.31.0"."""
    return int(text.removeprefix("v").split(".")[1])


def spec_of(answer: Mapping[str, Any]) -> Spec:
    """A celdiff spec as a :class:`~dra_driver.schedsim.gates.Spec`."""
    min_compat = answer.get("minCompatibilityVersion")
    return Spec(
        minor_of_version(answer["version"]),
        bool(answer["default"]),
        str(answer["preRelease"]) or "GA",  # featuregate.GA is the empty prerelease
        bool(answer.get("lockToDefault", False)),
        minor_of_version(min_compat) if min_compat else None,
    )


def table_names(answer: Mapping[str, Any]) -> set[str]:
    """The gates of the table: the DRA gates and every gate one of them depends on."""
    names = {n for n in answer["specs"] if is_table_gate(n)}
    deps = answer.get("dependencies") or {}
    return names | {d for n in names for d in deps.get(n) or []}


def table_lines(answer: Mapping[str, Any]) -> list[str]:
    """The release's lines of ``gates.TABLES_TEXT``."""
    deps = answer.get("dependencies") or {}
    out = []
    for name in sorted(table_names(answer)):
        parts = [name]
        for s in map(spec_of, answer["specs"][name]):
            text = f"{s.version}:{'on' if s.default else 'off'}:{s.pre_release}"
            text += ":locked" if s.locked else ""
            text += f":min{s.min_compatibility}" if s.min_compatibility is not None else ""
            parts.append(text)
        line = " ".join(parts)
        if deps.get(name):
            line += " <- " + ",".join(sorted(deps[name]))
        out.append(line)
    return out


def other_names(answer: Mapping[str, Any]) -> set[str]:
    """The release's gates outside the table."""
    return set(answer["specs"]) - table_names(answer) - SPECIAL


def other_tokens(answer: Mapping[str, Any]) -> list[str]:
    """The release's gates outside the table as ``gate_names`` writes them: ``Name:<stage>`` at the stock versions.

    The stage is the spec in effect at emulation = binary, minimum compatibility = binary - 1 (see
    ``gate_names.STAGE_CODES``); ``!`` marks a gate locked to its default.
    """
    minor = minor_of_version(answer["emulationVersion"])
    codes = {v: k for k, v in STAGE_CODES.items()}
    out = []
    for name in sorted(other_names(answer)):
        spec = spec_at(tuple(spec_of(s) for s in answer["specs"][name]), minor, minor - 1)
        assert spec is not None, name
        out.append(f"{name}:{codes[(spec.pre_release, spec.default)]}{'!' if spec.locked else ''}")
    return out


def dependency_tokens(answer: Mapping[str, Any]) -> list[str]:
    """The dependencies of the release's gates outside the table: ``Name<Dep,Dep``."""
    table = table_names(answer)
    deps = answer.get("dependencies") or {}
    return [f"{n}<{','.join(sorted(d))}" for n, d in sorted(deps.items()) if n not in table and d]


def main() -> None:
    version = sys.argv[1] if len(sys.argv) > 1 else K8S_VERSION
    oracle = Celdiff(version)
    try:
        answer = oracle.ask({"kind": "gates"})
    finally:
        oracle.close()
    print("\n".join(table_lines(answer)))
    print()
    print(" ".join(other_tokens(answer)))
    print()
    print(" ".join(dependency_tokens(answer)))


if __name__ == "__main__":
    main()
