"""The DRA servicers translate each version's messages: v1 answers a share's ``share_id``, v1beta1 has none."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import grpc

from dra_driver.appkit.inventory import node_publication
from dra_driver.core.mig import MigStrategy
from dra_driver.sources.fake import FakeGpuSource
from kubelet_plugin.servicer import DraV1beta1Servicer, DraV1Servicer
from kubelet_plugin.start_gate import StartGate
from proto.dra.v1 import api_pb2 as v1
from proto.dra.v1beta1 import api_pb2 as v1beta1
from testkit.claimdata import allocated_claim, new_uid
from tests.unit.kubelet_plugin.device_states import Claims, DeviceStateFactory

NO_CONTEXT = cast(grpc.ServicerContext, object())  # the servicers never read the call's context


def test_a_share_id_is_answered_in_v1_and_left_out_of_v1beta1(tmp_path: Path, device_state: DeviceStateFactory) -> None:
    gpus = FakeGpuSource("a100-80x1", "node-a").gpus()
    claims = Claims()
    share = new_uid()
    ref = claims.add(allocated_claim(result_fields=[{"shareID": share, "consumedCapacity": {"memory": "20Gi"}}]))
    state = device_state(
        tmp_path, claims, publication=node_publication(gpus, MigStrategy.NONE, None, consumable=True), sharing=True
    )
    claim = {"namespace": ref.namespace, "uid": ref.uid, "name": ref.name}
    new = DraV1Servicer(StartGate.opened(state)).NodePrepareResources(
        v1.NodePrepareResourcesRequest(claims=[v1.Claim(**claim)]), NO_CONTEXT
    )
    old = DraV1beta1Servicer(StartGate.opened(state)).NodePrepareResources(
        v1beta1.NodePrepareResourcesRequest(claims=[v1beta1.Claim(**claim)]),
        NO_CONTEXT,
    )
    [dev] = new.claims[ref.uid].devices
    assert (dev.device_name, dev.share_id, new.claims[ref.uid].error) == ("gpu-0", share, "")
    [old_dev] = old.claims[ref.uid].devices
    assert old_dev.device_name == "gpu-0" and "share_id" not in {f.name for f in old_dev.DESCRIPTOR.fields}
    unprepared = DraV1Servicer(StartGate.opened(state)).NodeUnprepareResources(
        v1.NodeUnprepareResourcesRequest(claims=[v1.Claim(**claim)]), NO_CONTEXT
    )
    assert unprepared.claims[ref.uid].error == ""
