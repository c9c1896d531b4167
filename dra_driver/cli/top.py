"""``dra-gpu top``: per node, the claims' GPUs, how busy they are, how long they have been idle, and broken GPUs.

Reads every kubelet plugin's /metrics (through the API server's pod proxy, or ``--url`` directly)
and prints one line per prepared device: node, namespace/claim, pods, device, utilization, memory
in use and idle time (``!`` once past ``--idle-after``, the chart's alert threshold), then the GPUs
a health cause makes Unhealthy, then the devices ``dra-gpu cordon`` took out of service (their
DeviceTaintRules: pool, device, effect, reason; or, where no DeviceTaintRule is served, the local
cordons on the nodes read, effect ``withheld``). ``-o json`` prints the same rows. Exit 0; 1 when a plugin could not
be read (the others are still shown); 2 on a usage error. Called by ``dra_driver.cli.main``.

The plugin's series name a claim by its UID unless the chart enables tenant labels: top names it
(namespace/name and pods) from the ResourceClaims, read through the API server (always when reading
the cluster, with ``--url`` when ``--kubeconfig`` is given); a claim it cannot name shows as
``uid:<UID>``. A plugin whose /metrics wants a token or a client certificate (the chart's
``metrics.auth``) is read with ``--url`` and ``--token-file`` / ``--cert``: the API server's pod
proxy passes neither on.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

# The metrics parser is loaded when top runs: it pulls in prometheus_client and structlog, which no other command needs.
if TYPE_CHECKING:
    from dra_driver.core.cordon import CordonedDevice
    from dra_driver.kube.top_api import KubeTopApi
    from dra_driver.obs.scrape import ClaimDevice, NodeView, ScrapeCredentials

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
    claim = f"{d.namespace}/{d.claim}" if d.claim else f"uid:{d.claim_uid or '?'}"
    return [d.node, claim, d.pods or "-", d.device, util, _bytes(d.memory_bytes), idle]


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def _credentials(args: argparse.Namespace) -> ScrapeCredentials:
    from dra_driver.obs.scrape import ScrapeCredentials

    def path(value: str | None) -> Path | None:
        return Path(value) if value else None

    return ScrapeCredentials(
        token_file=path(args.token_file),
        ca_file=path(args.cacert),
        cert_file=path(args.cert),
        key_file=path(args.key),
        insecure=args.insecure_skip_tls_verify,
    )


def _name_claims(api: KubeTopApi, views: dict[str, NodeView], problems: list[str]) -> None:
    """Fill in the namespace, name and pods of the rows that know their claim by UID only."""
    from dra_driver.kube.top_api import KubeApiError

    unnamed = [d for v in views.values() for d in v.devices if not d.claim and d.claim_uid]
    if not unnamed:
        return
    try:
        claims = api.claims_by_uid({d.claim_uid for d in unnamed})
    except KubeApiError as err:
        problems.append(f"the ResourceClaims (to name claims known by UID): {err}")
        return
    for d in unnamed:
        if (found := claims.get(d.claim_uid)) is not None:
            d.namespace, d.claim = found[0], found[1]
            d.pods = d.pods or ",".join(found[2])
    for v in views.values():
        v.devices.sort(key=lambda r: (r.namespace, r.claim, r.claim_uid, r.device))


def _cordons(args: argparse.Namespace, problems: list[str], nodes: Iterable[str] = ()) -> list[CordonedDevice]:
    """The devices ``dra-gpu cordon`` took out of service (none without a cluster).

    Its DeviceTaintRules, and the local cordons recorded on ``nodes`` (where no DeviceTaintRule is served).
    """
    if args.url and not args.kubeconfig:
        return []
    from dra_driver.cli.cordon import cordon_lines
    from dra_driver.kube.taint_rules_api import KubeApiError, connect

    try:
        return cordon_lines(connect(args.kubeconfig), nodes)
    except KubeApiError as err:
        if err.status == 403:  # not a platform admin: the rest of top still stands
            print(f"note: cordoned devices not shown: {err}", file=sys.stderr)
        else:
            problems.append(f"the DeviceTaintRules (cordoned devices): {err}")
        return []


def _views(args: argparse.Namespace) -> tuple[dict[str, NodeView], list[str]]:
    from dra_driver.obs.scrape import ScrapeError, fetch, parse

    views: dict[str, NodeView] = {}
    problems: list[str] = []
    if args.url:
        try:
            creds = _credentials(args)
            creds.token()  # a token file that cannot be read is a usage error, not a plugin that cannot be read
        except ScrapeError as err:
            raise SystemExit(f"error: {err}") from None
        for url in args.url:
            try:
                views[url] = parse(fetch(url, credentials=creds))
            except ScrapeError as err:
                problems.append(str(err))
        if args.kubeconfig:
            from dra_driver.kube.top_api import KubeApiError, connect

            try:
                _name_claims(connect(args.kubeconfig), views, problems)
            except KubeApiError as err:
                problems.append(f"the ResourceClaims (to name claims known by UID): {err}")
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
            views[node] = parse(api.scrape(args.namespace, name, args.port, args.scheme))
        except (KubeApiError, ScrapeError) as err:
            hint = " (its /metrics wants a token or a client certificate: read it with --url)" if "401" in str(err) else ""
            problems.append(f"{node} ({name}): {err}{hint}")
    _name_claims(api, views, problems)
    return views, problems


def _top(args: argparse.Namespace) -> int:
    if args.idle_after <= 0:
        print("error: --idle-after must be positive", file=sys.stderr)
        return 2
    if not args.url and (args.token_file or args.cert):
        print(
            "error: --token-file and --cert need --url: the API server's pod proxy passes neither a token nor a client "
            "certificate on to the plugin (e.g. kubectl port-forward, then --url https://127.0.0.1:<port>/metrics)",
            file=sys.stderr,
        )
        return 2
    if bool(args.cert) != bool(args.key):
        print("error: --cert and --key go together", file=sys.stderr)
        return 2
    views, problems = _views(args)
    cordons = _cordons(args, problems, views)
    devices = [d for v in views.values() for d in v.devices]
    unhealthy = {(node, gpu): causes for node, v in views.items() for gpu, causes in v.unhealthy.items()}
    if args.output == "json":
        out = {
            "devices": [asdict(d) for d in devices],
            "unhealthy": [{"node": n, "gpu": g, "causes": c} for (n, g), c in sorted(unhealthy.items())],
            "cordoned": [asdict(c) for c in cordons],
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
        print(f"\n{len(devices)} device(s) in {len({(d.namespace, d.claim, d.claim_uid) for d in devices})} claim(s); "
              f"{idle} idle for {_duration(args.idle_after)} or more (!)")  # fmt: skip
        for (node, gpu), causes in sorted(unhealthy.items()):
            print(f"UNHEALTHY {node} {gpu}: {', '.join(causes) or 'cause not given'}")
        for c in cordons:
            part_of = "" if c.device == c.cordoned_as else f", with {c.cordoned_as}"
            print(f"CORDONED {c.pool} {c.device} ({c.effect}{part_of}): {c.reason}")
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
    t.add_argument(
        "--scheme",
        choices=["http", "https"],
        default="http",
        help="how the API server reaches the plugins' /metrics (https: the chart's metrics.tls)",
    )
    t.add_argument("--token-file", help="with --url: send 'Authorization: Bearer <the token in this file>'")
    t.add_argument("--cacert", help="with an https --url: the CA bundle to check the plugin's certificate against")
    t.add_argument("--cert", help="with an https --url: a client certificate (PEM) for a plugin that wants one")
    t.add_argument("--key", help="the client certificate's key (PEM)")
    t.add_argument("--insecure-skip-tls-verify", action="store_true", help="with an https --url: do not check the certificate")
    t.add_argument("--idle-after", type=float, default=1800.0, help="seconds after which an idle device is marked (1800)")
    t.add_argument("-o", "--output", choices=["text", "json"], default="text")
    t.set_defaults(func=_top)
