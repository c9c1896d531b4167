"""The kubelet's side of the plugin's sockets, for ``make gpu-check``: registration, prepare, unprepare.

The calls the kubelet makes, with the stubs generated from ``proto/`` (the same the plugin
serves): ``GetInfo`` and ``NotifyRegistrationStatus`` on the registration socket, then
``NodePrepareResources`` and ``NodeUnprepareResources`` (resource.k8s.io v1) on the DRA socket,
one claim per call as the kubelet makes them for a pod. Each call's wall time is kept.
Called by ``testkit.gpu_check.flow``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import grpc

from proto.dra.v1 import api_pb2 as v1
from proto.dra.v1 import api_pb2_grpc as v1_grpc
from proto.pluginregistration import api_pb2 as reg
from proto.pluginregistration import api_pb2_grpc as reg_grpc

CALL_TIMEOUT_S = 45.0


@dataclass(frozen=True, slots=True)
class Registration:
    """What ``GetInfo`` answered."""

    type: str
    name: str
    endpoint: str
    versions: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Prepared:
    """One claim's ``NodePrepareResources`` answer, and how long the call took."""

    error: str
    devices: tuple[tuple[str, str, tuple[str, ...]], ...]
    """(pool, device, CDI device ids) per device."""
    seconds: float


class Kubelet:
    """Calls on one plugin's registration and DRA sockets."""

    def __init__(self, registration_socket: Path, dra_socket: Path) -> None:
        self.registration_socket = registration_socket
        self.dra_socket = dra_socket

    def register(self) -> Registration:
        """``GetInfo``, then ``NotifyRegistrationStatus(registered)``, as the kubelet's plugin watcher does."""
        with grpc.insecure_channel(f"unix://{self.registration_socket}") as ch:
            stub = reg_grpc.RegistrationStub(ch)
            info = stub.GetInfo(reg.InfoRequest(), timeout=CALL_TIMEOUT_S)
            stub.NotifyRegistrationStatus(reg.RegistrationStatus(plugin_registered=True), timeout=CALL_TIMEOUT_S)
        return Registration(info.type, info.name, info.endpoint, tuple(info.supported_versions))

    def prepare(self, namespace: str, uid: str, name: str) -> Prepared:
        """``NodePrepareResources`` for one claim."""
        req = v1.NodePrepareResourcesRequest(claims=[v1.Claim(namespace=namespace, uid=uid, name=name)])
        with grpc.insecure_channel(f"unix://{self.dra_socket}") as ch:
            stub = v1_grpc.DRAPluginStub(ch)
            t0 = time.perf_counter()
            resp = stub.NodePrepareResources(req, timeout=CALL_TIMEOUT_S)
            spent = time.perf_counter() - t0
        got = resp.claims[uid]
        devices = tuple((d.pool_name, d.device_name, tuple(d.cdi_device_ids)) for d in got.devices)
        return Prepared(got.error, devices, spent)

    def unprepare(self, namespace: str, uid: str, name: str) -> tuple[str, float]:
        """``NodeUnprepareResources`` for one claim: its error ("" when done) and the call's seconds."""
        req = v1.NodeUnprepareResourcesRequest(claims=[v1.Claim(namespace=namespace, uid=uid, name=name)])
        with grpc.insecure_channel(f"unix://{self.dra_socket}") as ch:
            stub = v1_grpc.DRAPluginStub(ch)
            t0 = time.perf_counter()
            resp = stub.NodeUnprepareResources(req, timeout=CALL_TIMEOUT_S)
            spent = time.perf_counter() - t0
        return resp.claims[uid].error, spent
