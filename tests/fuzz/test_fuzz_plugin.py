"""Fuzzing the kubelet plugin's inputs: ResourceClaim JSON from the API server and DRA gRPC requests.

Claims: mutated allocated claims (with sharing and MPS configs) through ``DeviceState.prepare``,
each batched with a good claim. Per input: the call never raises; every claim gets an answer;
the good claim is always prepared; a refused claim leaves no checkpoint entry or CDI file; no
answer is an "internal error" (that would be a bug the isolation only contained).

Requests: NodePrepareResources/NodeUnprepareResources messages with hostile UIDs, names,
duplicates and sizes through the real servicer, and raw garbage bytes to the methods over a
real unix socket: every request gets an entry per UID, the server keeps serving.
"""

from __future__ import annotations

import random
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc

from dra_driver.core.config import API_VERSION
from dra_driver.files.cdi_store import CdiStore
from kubelet_plugin.prepare.requests import ClaimRef
from kubelet_plugin.prepare.state import DeviceState
from kubelet_plugin.servicer import DraV1Servicer, add_dra_services
from kubelet_plugin.sockets import unix_server
from kubelet_plugin.start_gate import StartGate
from proto.dra.v1 import api_pb2 as v1
from testkit.claimdata import DRIVER, allocated_claim, new_uid
from tests.fuzz import harness
from tests.unit.kubelet_plugin.device_states import new_device_state


def gpu_config(sharing: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "source": "FromClaim",
            "requests": ["gpu"],
            "opaque": {"driver": DRIVER, "parameters": {"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": sharing}},
        }
    ]


SEEDS: list[dict[str, Any]] = [
    allocated_claim(name="seed", devices=["gpu-1", "gpu-2"], requests=["gpu", "gpu"]),
    allocated_claim(
        name="seed", devices=["gpu-3"], config=gpu_config({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}})
    ),
    allocated_claim(
        name="seed",
        devices=["gpu-4"],
        config=gpu_config(
            {
                "strategy": "MPS",
                "mpsConfig": {
                    "defaultActiveThreadPercentage": 50,
                    "defaultPinnedDeviceMemoryLimit": "10Gi",
                    "defaultPerDevicePinnedMemoryLimit": {"gpu-4": "5Gi"},
                },
            }
        ),
    ),
]


class Claims:
    def __init__(self) -> None:
        self.objs: dict[tuple[str, str], Any] = {}

    def get_claim(self, namespace: str, name: str) -> Any:
        try:
            return self.objs[(namespace, name)]
        except KeyError:
            raise LookupError(f"claim {namespace}/{name} not found") from None


def make_state(root: Path, claims: Claims) -> DeviceState:
    return new_device_state(root, claims, sharing=True)


def test_hostile_claims_get_their_own_answer_and_never_disturb_a_good_one(state_dir: Path) -> None:
    claims = Claims()
    state = make_state(state_dir, claims)
    cdi = CdiStore(state_dir / "cdi", DRIVER)
    rng = random.Random(harness.seed_for("plugin-claims"))

    def inputs() -> Iterator[Any]:
        for i in range(harness.budget(1500)):
            yield i, harness.mutate(rng.choice(SEEDS), rng)

    def prepare(item: tuple[int, Any]) -> None:
        i, obj = item
        uid = new_uid()
        ref = ClaimRef("default", uid, f"fuzz-{i}")
        if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict):
            obj["metadata"].update(uid=uid, name=ref.name, namespace="default")
        claims.objs[("default", ref.name)] = obj
        good = claims.objs[("default", "good")] = allocated_claim(name="good", devices=["gpu-0"])
        good_ref = ClaimRef("default", good["metadata"]["uid"], "good")
        try:
            out = state.prepare([ref, good_ref])
            assert "" == out[good_ref.uid].error
            assert not out[ref.uid].error.startswith("internal error"), out[ref.uid].error
            prepared = state.prepared_claims()
            if out[ref.uid].error:
                assert uid not in prepared and uid not in cdi.claim_uids()
            else:
                assert out[ref.uid].devices
        finally:
            unprepared = state.unprepare([ref, good_ref])
            del claims.objs[("default", ref.name)]
        assert {ref.uid: "", good_ref.uid: ""} == unprepared
        assert {} == dict(state.prepared_claims())
        assert set() == cdi.claim_uids()

    rep = harness.run("plugin claims (prepare+unprepare)", inputs(), prepare, ())
    harness.assert_clean(rep)


UID_CHOICES = (
    "",
    "\n",
    "not-a-uid",
    "0a1b2c3d-0000-4000-8000-000000000001\n",
    "0A1B2C3D-0000-4000-8000-000000000001",
    "../../../etc/passwd",
    "x" * 10_000,
    "0a1b2c3d-0000-4000-8000-00000000000\u0661",
)
NAME_CHOICES = ("", "a", "A", "a/b", "..", "x" * 300, "a\nb", "ns.with.dots", "-a", "a" * 63, "\u00e9")


def random_request(rng: random.Random) -> v1.NodePrepareResourcesRequest:
    req = v1.NodePrepareResourcesRequest()
    fixed = new_uid()
    for _ in range(rng.choice([0, 1, 2, 5, 50])):
        uid = rng.choice([new_uid(), fixed, rng.choice(UID_CHOICES)])
        req.claims.add(
            uid=uid,
            namespace=rng.choice([*NAME_CHOICES, "default"]),
            name=rng.choice([*NAME_CHOICES, "".join(rng.choices(string.printable, k=rng.randint(0, 40)))]),
        )
    return req


def test_hostile_grpc_requests_get_one_answer_per_uid(state_dir: Path) -> None:
    claims = Claims()
    servicer = DraV1Servicer(StartGate.opened(make_state(state_dir, claims)))
    rng = random.Random(harness.seed_for("plugin-grpc"))

    def call(req: v1.NodePrepareResourcesRequest) -> None:
        resp = servicer.NodePrepareResources(req, None)  # type: ignore[arg-type]
        uids = {c.uid for c in req.claims}
        assert uids == set(resp.claims)
        assert all(resp.claims[u].error for u in uids)  # nothing here is a real claim
        unresp = servicer.NodeUnprepareResources(v1.NodeUnprepareResourcesRequest(claims=req.claims), None)  # type: ignore[arg-type]
        assert uids == set(unresp.claims)

    rep = harness.run("plugin gRPC requests", (random_request(rng) for _ in range(harness.budget(1500))), call, ())
    harness.assert_clean(rep)


def test_garbage_bytes_on_the_dra_socket_never_stop_the_server(tmp_path: Path) -> None:
    claims = Claims()
    state = make_state(tmp_path, claims)
    sock = tmp_path / "dra.sock"
    server = unix_server(sock)
    add_dra_services(server, StartGate.opened(state))
    server.start()
    rng = random.Random(harness.seed_for("plugin-socket"))
    try:
        with grpc.insecure_channel(f"unix://{sock}") as channel:
            raw = channel.unary_unary("/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources", None, None)
            typed = channel.unary_unary(
                "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources",
                request_serializer=v1.NodePrepareResourcesRequest.SerializeToString,
                response_deserializer=v1.NodePrepareResourcesResponse.FromString,
            )

            def send(body: bytes) -> None:
                try:
                    raw(body, timeout=10)
                except grpc.RpcError as err:
                    assert err.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.INVALID_ARGUMENT), err

            def inputs() -> Iterator[bytes]:
                for _ in range(harness.budget(300)):
                    good = random_request(rng).SerializeToString()
                    body = bytearray(good)
                    for _ in range(rng.randint(1, 6)):
                        if body:
                            body[rng.randrange(len(body))] = rng.randrange(256)
                    yield bytes(body) if rng.random() < 0.7 else rng.randbytes(rng.randint(0, 4000))

            rep = harness.run("plugin socket raw bytes", inputs(), send, ())
            harness.assert_clean(rep)
            uid = new_uid()
            answer = typed(
                v1.NodePrepareResourcesRequest(claims=[v1.Claim(uid=uid, namespace="default", name="nope")]), timeout=10
            )
            assert "not found" in answer.claims[uid].error  # still serving, still answering per claim
    finally:
        server.stop(grace=None)
