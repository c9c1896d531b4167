"""The kubelet's side of a DRA socket, shared by both drivers: v1 prepare/unprepare, one claim per call.

Used by ``bench.peer.measure`` (start polling, sequential latency), ``bench.peer.burst`` and
``bench.peer.run`` (one ``DraClient`` per driver per run).
"""

from __future__ import annotations

from pathlib import Path

import grpc

from proto.dra.v1 import api_pb2 as v1
from proto.dra.v1 import api_pb2_grpc as v1_grpc

CALL_TIMEOUT_S = 30.0

Ref = tuple[str, str, str]  # namespace, uid, name


class DraClient:
    """The kubelet's side of one DRA socket: one kept-open channel, v1 calls, one claim per call."""

    def __init__(self, socket: Path) -> None:
        self.channel = grpc.insecure_channel(f"unix://{socket}")
        self.stub = v1_grpc.DRAPluginStub(self.channel)

    def prepare(self, ref: Ref) -> str:
        """Empty when the claim was prepared with at least one device, else the error."""
        try:
            resp = self.stub.NodePrepareResources(
                v1.NodePrepareResourcesRequest(claims=[v1.Claim(namespace=ref[0], uid=ref[1], name=ref[2])]),
                timeout=CALL_TIMEOUT_S,
            )
        except grpc.RpcError as err:
            return f"rpc {err.code().name}: {err.details()}"
        got = resp.claims.get(ref[1])
        if got is None:
            return "claim missing from the answer"
        return got.error or ("" if got.devices else "no devices")

    def unprepare(self, ref: Ref) -> str:
        try:
            resp = self.stub.NodeUnprepareResources(
                v1.NodeUnprepareResourcesRequest(claims=[v1.Claim(namespace=ref[0], uid=ref[1], name=ref[2])]),
                timeout=CALL_TIMEOUT_S,
            )
        except grpc.RpcError as err:
            return f"rpc {err.code().name}: {err.details()}"
        got = resp.claims.get(ref[1])
        return "claim missing from the answer" if got is None else got.error

    def close(self) -> None:
        self.channel.close()


def socket_answers(socket: Path) -> bool:
    """A NodePrepareResources with zero claims succeeds (a fresh channel: no reconnect backoff)."""
    if not socket.exists():
        return False
    try:
        with grpc.insecure_channel(f"unix://{socket}") as ch:
            v1_grpc.DRAPluginStub(ch).NodePrepareResources(v1.NodePrepareResourcesRequest(), timeout=1.0)
        return True
    except grpc.RpcError:
        return False
