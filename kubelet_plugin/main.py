"""Entry point of ``dra-gpu-kubelet-plugin``: serves its sockets first, then builds the plugin behind them.

Lifecycle: settings and the checks that must stop start-up before the kubelet sees a socket (the
node's boot id, the metrics port and files) → the DRA socket, then the registration socket
(``kubelet_plugin.servers``; the kubelet may dial and register as soon as it sees it), then the
health port → the API client loads on a thread (``kubelet_plugin.api_link``) → everything else
(``kubelet_plugin.bringup``, imported only now: GPUs, MIG, the publication, checkpoint recovery,
monitoring, metrics, the slice publisher). Calls the kubelet makes meanwhile wait at the
``kubelet_plugin.start_gate`` until recovery opens it (a failed start-up refuses them and removes the
sockets). So after a restart or a reboot the kubelet registers the plugin as soon as its sockets
serve, a pod it syncs then has its prepare answered when recovery ends instead of failing into a
resync, and the old registration is replaced before the kubelet wipes the node's slices. In a
rolling update (another pod of the driver serving its registration) the new pod registers only once
it has recovered: the kubelet calls the newest registration, and the old pod answers meanwhile. Each
registration the kubelet accepts prompts the pods that waited for the plugin, once recovery is done
(``kubelet_plugin.waiting_pods``). On SIGTERM: health NOT_SERVING, registration socket removed first
(the kubelet deregisters), in-flight calls finish (grace), DRA socket removed
(``PluginServers.stop``), publisher and metrics server stopped (``kubelet_plugin.bringup.Running``),
the state closed last.

Only what the sockets need is imported at the top: this module is the plugin's start to its sockets.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import structlog

from dra_driver.appkit.daemon import run_daemon
from dra_driver.files.boot_id import BootIdError, read_boot_id
from dra_driver.obs.ports import metrics_port_problem
from dra_driver.obs.scrape_auth import load_or_log
from kubelet_plugin.api_link import ApiLink
from kubelet_plugin.servers import start_servers
from kubelet_plugin.servicer import MetricsSlot
from kubelet_plugin.settings import FLAGS, Settings, parse
from kubelet_plugin.start_gate import StartGate
from kubelet_plugin.waiting_pods import RetryPrompter

if TYPE_CHECKING:
    from kubelet_plugin.prepare.state import DeviceState

log = structlog.get_logger(__name__)

COMPONENT = "dra-gpu-kubelet-plugin"


def _preflight(settings: Settings) -> str | None:
    """The node's boot id, and whether the metrics port and files are usable, before any socket exists.

    The boot id is read once: the checkpoint and both simulators must agree on the boot. None
    (logged) when start-up must stop.
    """
    try:
        boot_id = read_boot_id(settings.boot_id_file)
    except BootIdError as err:
        flag = FLAGS.row("boot-id-file")
        log.error("boot_id_unreadable", error=str(err), hint=f"set {flag.env} ({flag.option}) to the node's boot id")
        return None
    if problem := metrics_port_problem(settings.metrics_address, settings.metrics_port):
        # The kubelet must not register a plugin that is about to exit.
        log.error("metrics_port_unavailable", error=problem, address=settings.metrics_address, port=settings.metrics_port)
        return None
    if settings.metrics_port >= 0 and load_or_log(settings.metrics_auth) is None:  # the token and TLS files
        return None
    return boot_id


def _retry_prompter(settings: Settings, link: ApiLink, gate: StartGate, stop: threading.Event) -> RetryPrompter | None:
    """What prompts the kubelet to retry the pods that waited for this plugin (None when off).

    A registration wakes it; it prompts once the state is recovered (``gate``), when their prepare can be answered.
    """
    if not settings.retry_waiting_pods:
        return None
    prompter = RetryPrompter.over_link(
        link.wait, link.get_claim, driver=settings.driver_name, node=settings.node_name, ready=lambda: gate.is_open
    )
    prompter.start(stop)
    return prompter


def run(settings: Settings, stop: threading.Event) -> int:
    """Run the plugin until ``stop`` is set; return the exit code."""
    structlog.contextvars.bind_contextvars(node=settings.node_name, driver=settings.driver_name)
    boot_id = _preflight(settings)
    if boot_id is None:
        return 2
    gate = StartGate()
    link = ApiLink(kubeconfig=settings.kubeconfig, node_name=settings.node_name, component=COMPONENT)
    slot = MetricsSlot() if settings.metrics_port >= 0 else None
    prompter = _retry_prompter(settings, link, gate, stop)
    servers = start_servers(
        settings,
        gate,
        slot,
        health_streams=settings.health != "off" and settings.health_stream,
        on_registered=prompter.registered if prompter is not None else None,
    )
    link.start()  # on its thread while the rest loads
    state: DeviceState | None = None
    try:
        try:
            from kubelet_plugin.bringup import bring_up, build

            built = build(settings, link, boot_id=boot_id)
            state = built.state
            running = bring_up(settings, link, gate, built, boot_id=boot_id, slot=slot, stop=stop)
        except BaseException as err:  # held calls are refused with the reason, the sockets removed; logged by run_daemon
            gate.fail(f"{type(err).__name__}: {err}")
            servers.stop()
            raise
        if running is None:  # the metrics port or files, gone since the preflight (logged where found)
            servers.stop()
            return 2
        log.info("plugin_started")
        stop.wait()
        log.info("plugin_stopping")
        servers.stop()
        running.stop()
        return 0
    finally:
        if state is not None:
            state.close()  # after the servers: the last checkpoint write durable, any later one as it is made


def main(argv: list[str] | None = None) -> int:
    """Console script entry: parse, configure logs, run until SIGTERM/SIGINT."""
    return run_daemon("plugin", argv, parse, run)


if __name__ == "__main__":
    raise SystemExit(main())
