"""A small device plugin for e2e tests: plays NVIDIA's device plugin beside our DRA driver on a `KubeletNode`.

Speaks the kubelet's device-plugin API v1beta1 (``proto/deviceplugin/v1beta1``): serves
``DevicePlugin`` (options, ``ListAndWatch`` with ``count`` healthy devices, an empty ``Allocate``)
on its own socket in the kubelet's device-plugins dir (``KubeletNode.device_plugin_dir``), then
calls ``Registration.Register`` on ``kubelet.sock`` there for ``resource`` (``nvidia.com/gpu``).
The kubelet then lists the resource in the Node's capacity and allocatable. ``stop`` ends the
stream and removes the socket, as a device plugin's pod going away does: the kubelet marks the
devices unhealthy (allocatable 0) and drops the resource after its 5 minute grace.

Used by ``e2e/test_device_plugin_coexistence.py``. Unix socket paths are limited to 107 bytes
and a test's dirs are long: both sockets are reached through a short link under /tmp.
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from proto.deviceplugin.v1beta1 import api_pb2 as pb
from proto.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc

API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"


class _Servicer(pb_grpc.DevicePluginServicer):
    def __init__(self, ids: list[str], done: threading.Event) -> None:
        self._ids = ids
        self._done = done

    def GetDevicePluginOptions(self, request: pb.Empty, context: grpc.ServicerContext) -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions()

    def ListAndWatch(self, request: pb.Empty, context: grpc.ServicerContext) -> Iterator[pb.ListAndWatchResponse]:
        yield pb.ListAndWatchResponse(devices=[pb.Device(ID=i, health="Healthy") for i in self._ids])
        while not self._done.wait(0.2) and context.is_active():
            pass  # the list never changes; the stream ends when the plugin stops

    def GetPreferredAllocation(
        self, request: pb.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> pb.PreferredAllocationResponse:
        return pb.PreferredAllocationResponse()  # never asked: the options say it is not available

    def PreStartContainer(
        self, request: pb.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()  # never asked: the options say it is not required

    def Allocate(self, request: pb.AllocateRequest, context: grpc.ServicerContext) -> pb.AllocateResponse:
        return pb.AllocateResponse(container_responses=[pb.ContainerAllocateResponse() for _ in request.container_requests])


class FakeDevicePlugin:
    """``count`` healthy devices of ``resource`` registered with the kubelet whose device-plugins dir is ``plugin_dir``."""

    def __init__(
        self, plugin_dir: Path, *, resource: str = "nvidia.com/gpu", count: int = 8, endpoint: str = "fake-gpu.sock"
    ) -> None:
        self.plugin_dir = plugin_dir
        self.resource = resource
        self.endpoint = endpoint
        self.ids = [f"GPU-fake-{i:04d}" for i in range(count)]
        self._server: grpc.Server | None = None
        self._done = threading.Event()
        self._short = Path(tempfile.mkdtemp(prefix="dp-")) / "d"
        self._short.symlink_to(plugin_dir, target_is_directory=True)

    @property
    def socket(self) -> Path:
        """The plugin's socket, as the kubelet sees it (in the device-plugins dir)."""
        return self.plugin_dir / self.endpoint

    def start(self, timeout: float = 10.0) -> None:
        """Serve, then register with the kubelet (raises ``grpc.RpcError`` if it refuses)."""
        self._done.clear()
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_DevicePluginServicer_to_server(_Servicer(self.ids, self._done), server)
        server.add_insecure_port(f"unix://{self._short / self.endpoint}")
        server.start()
        self._server = server
        with grpc.insecure_channel(f"unix://{self._short / KUBELET_SOCKET}") as channel:
            grpc.channel_ready_future(channel).result(timeout=timeout)
            request = pb.RegisterRequest(
                version=API_VERSION, endpoint=self.endpoint, resource_name=self.resource, options=pb.DevicePluginOptions()
            )
            pb_grpc.RegistrationStub(channel).Register(request, timeout=timeout)

    def stop(self) -> None:
        """End the stream, stop serving and remove the socket (the device plugin's pod is gone)."""
        self._done.set()
        if self._server is not None:
            self._server.stop(grace=1.0).wait(5.0)
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()

    def close(self) -> None:
        """``stop`` and drop the short link."""
        self.stop()
        with contextlib.suppress(OSError):
            self._short.unlink()
            self._short.parent.rmdir()

    def __enter__(self) -> FakeDevicePlugin:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
