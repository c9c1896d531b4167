"""``dra-gpu top``: per node, the claims' GPUs, how busy they are, how long they have been idle, and broken GPUs.

Reads every kubelet plugin's /metrics (through the API server's pod proxy, or ``--url`` directly)
and prints one line per prepared device: node, namespace/claim, pods, device, utilization, memory
in use and idle time (``!`` once past ``--idle-after``, the chart's alert threshold), then the GPUs
a health cause makes Unhealthy. ``-o json`` prints the same rows. Exit 0; 1 when a plugin could not
be read (the others are still shown); 2 on a usage error. Called by ``dra_driver.cli.main``.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import TYPE_CHECKING

# The metrics parser is loaded when top runs: it pulls in prometheus_client and structlog, which no other command needs.
if TYPE_CHECKING:
    from dra_driver.obs.scrape import ClaimDevice, NodeView

DEFAULT_NAMESPACE = "dra-gpu"
DEFAULT_SELECTOR = "app.kubernetes.io/component=kubelet-plugin"
DEFAULT_PORT = 9420


def _duration(seconds: float) -> str:
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _bytes(value: float | None) -> str:
    if value is None:
        return "?"
    for unit, size in (("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if value >= size:
            return f"{value / size:.1f}{unit}"
    return f"{int(value)}"


def _row(d: ClaimDevice, idle_after: float) -> list[str]:
    util = "?" if d.utilization is None else f"{d.utilization * 100:.0f}%"
    idle = "-" if d.idle_s <= 0 else _duration(d.idle_s) + (" !" if d.idle_s >= idle_after else "")
    return [d.node, f"{d.namespace}/{d.claim}", d.pods or "-", d.device, util, _bytes(d.memory_bytes), idle]


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def _views(args: argparse.Namespace) -> tuple[dict[str, NodeView], list[str]]:
    from dra_driver.obs.scrape import ScrapeError, fetch, parse

    views: dict[str, NodeView] = {}
    problems: list[str] = []
    if args.url:
        for url in args.url:
            try:
                views[url] = parse(fetch(url))
            except ScrapeError as err:
                problems.append(str(err))
        return views, problems
    from dra_driver.kube.top_api import KubeApiError, connect

    try:
        api = connect(args.kubeconfig)
        pods = api.pods(args.namespace, args.selector)
    except KubeApiError as err:
        raise SystemExit(f"error: cannot list the plugin pods in {args.namespace} ({args.selector}): {err}") from None
    for pod in sorted(pods, key=lambda p: str((p.get("spec") or {}).get("nodeName", ""))):
        name = str((pod.get("metadata") or {}).get("name", ""))
        node = str((pod.get("spec") or {}).get("nodeName", "")) or name
        try:
            views[node] = parse(api.scrape(args.namespace, name, args.port))
        except (KubeApiError, ScrapeError) as err:
            problems.append(f"{node} ({name}): {err}")
    return views, problems


def _top(args: argparse.Namespace) -> int:
    if args.idle_after <= 0:
        print("error: --idle-after must be positive", file=sys.stderr)
        return 2
    views, problems = _views(args)
    devices = [d for v in views.values() for d in v.devices]
    unhealthy = {(node, gpu): causes for node, v in views.items() for gpu, causes in v.unhealthy.items()}
    if args.output == "json":
        out = {
            "devices": [asdict(d) for d in devices],
            "unhealthy": [{"node": n, "gpu": g, "causes": c} for (n, g), c in sorted(unhealthy.items())],
            "errors": problems,
        }
        print(json.dumps(out, indent=2))
    else:
        if devices:
            print(
                _table(
                    [["NODE", "CLAIM", "PODS", "DEVICE", "UTIL", "MEMORY", "IDLE"], *(_row(d, args.idle_after) for d in devices)]
                )
            )
        else:
            print(f"no prepared devices on the {len(views)} node(s) read")
        idle = sum(1 for d in devices if d.idle_s >= args.idle_after)
        print(f"\n{len(devices)} device(s) in {len({(d.namespace, d.claim) for d in devices})} claim(s); "
              f"{idle} idle for {_duration(args.idle_after)} or more (!)")  # fmt: skip
        for (node, gpu), causes in sorted(unhealthy.items()):
            print(f"UNHEALTHY {node} {gpu}: {', '.join(causes) or 'cause not given'}")
        for p in problems:
            print(f"could not read {p}", file=sys.stderr)
    return 1 if problems else 0


def add_top_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``dra-gpu top``."""
    t = sub.add_parser("top", help="per node: the claims' GPUs, their utilization, how long idle, broken GPUs")
    t.add_argument("--kubeconfig", help="kubeconfig (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
    t.add_argument("-n", "--namespace", default=DEFAULT_NAMESPACE, help=f"the release's namespace ({DEFAULT_NAMESPACE})")
    t.add_argument("--selector", default=DEFAULT_SELECTOR, help="label selector of the plugin pods")
    t.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"the plugin's metrics port ({DEFAULT_PORT})")
    t.add_argument("--url", action="append", help="read this /metrics URL instead of the cluster (repeatable)")
    t.add_argument("--idle-after", type=float, default=1800.0, help="seconds after which an idle device is marked (1800)")
    t.add_argument("-o", "--output", choices=["text", "json"], default="text")
    t.set_defaults(func=_top)
