"""What each Kubernetes Event reason the daemons record means, and what to do about it. Pure data.

The reasons are written where the Events are raised (``Notice("GpuUnhealthy", ...)`` in the
kubelet plugin and ``dra_driver.files.checkpoint_store``); this table says what each means for an
operator. Read by ``scripts/gen_reference.py events``, which finds every reason in the daemons'
code and fails when one has no entry here, or an entry names a reason nothing raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

EVENT_REASON_MEANINGS: Final[Mapping[str, str]] = {
    "CheckpointLost": "The plugin's checkpoint and its previous generation were unusable (moved aside). Claims are "
    "rebuilt from the CDI specs and the MIG instances; nothing is destroyed. Look at the node's disk.",
    "CheckpointMissing": "checkpoint.json was deleted while a previous generation exists; claims are rebuilt from it, "
    "the CDI specs and the MIG instances; nothing is destroyed.",
    "CheckpointRebuilt": "After a lost or missing checkpoint: what the rebuild kept, forgot and adopted, and the MIG "
    "instances no claim is known to own (kept in place for an administrator).",
    "CheckpointRecovered": "The checkpoint was unusable (moved aside); the previous generation, which may miss the last "
    "change, was used. Nothing is destroyed.",
    "CheckpointTooNew": "The checkpoint was written by a newer plugin (a rollback): this plugin refuses to prepare "
    "and publishes nothing until the newer version runs again. See the upgrade guide.",
    "DevicePluginConflict": "A device plugin serves GPUs on this node (status.allocatable lists nvidia.com/gpu or "
    "nvidia.com/mig-* above 0): the kubelet would hand out the GPUs the scheduler allocates through DRA, so none of "
    "the node's GPUs is published (its slices are emptied) until it is gone. Keep the device plugin off the node (a "
    "node label and its DaemonSet's nodeSelector or affinity), or remove it and use the chart's extendedResources "
    "mode. The message names the resources and counts.",
    "DevicePluginConflictCleared": "The device plugin's GPU resources are 0 or absent again: the node's GPUs are "
    "published again.",
    "DevicesWithheld": "The devices `dra-gpu cordon` recorded on the Node (annotation <driver>/cordoned-devices, "
    "where the API server serves no DeviceTaintRule) changed: the message names the cordoned devices with their "
    "reasons and every device withheld (a GPU with its MIG devices), or says all are published again. Pods already "
    "using a withheld device keep it; `dra-gpu uncordon` ends it.",
    "DevicesNotPublished": "The node's ResourceSlices are refused (the API server would drop fields that make the pool "
    "unsafe, e.g. shared counters without DRAPartitionableDevices): nothing is published, and why.",
    "DriverUserspaceMissing": "The NVIDIA driver's user-space files were not found under the driver root and some GPUs "
    "are not in the NVIDIA Container Toolkit's CDI spec: their claims are refused until it is fixed.",
    "GpuHealthRecordUnreadable": "The plugin's record of GPU health could not be read: every GPU is tainted NoSchedule "
    "until it is repaired.",
    "GpuHealthy": "A GPU that was unhealthy is healthy again; its taint is removed.",
    "GpuUnhealthy": "A GPU became unhealthy (an XID error, ECC, a lost GPU, ...): its devices are tainted, and "
    "evicted with health.evict on. The message names the device, its UUID and the cause.",
    "LocalCordonMalformed": "The Node's annotation <driver>/cordoned-devices is not a JSON object of device name -> "
    "reason: every device of the node is withheld (not published) until it is fixed or removed (kubectl annotate "
    "node NODE <driver>/cordoned-devices-).",
    "NodeRebooted": "The node's boot id changed: claims prepared before the reboot are prepared afresh.",
}
"""Event reason -> what it means (Events are recorded on the Node)."""
