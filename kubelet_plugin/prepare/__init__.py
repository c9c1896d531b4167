"""The kubelet plugin's prepare wing: NodePrepareResources and NodeUnprepareResources and their side effects.

``state.DeviceState`` batches calls under the node-wide lock and unprepares; ``claim_steps``
prepares one claim (plan, MIG and sharing side effects, CDI spec, checkpoint); ``requests``
reads the claims before the lock; ``recovery``, ``gc``, ``mig_ops``, ``sharing_ops``,
``group_commit`` and ``faults`` are each one concern of it. Used by ``kubelet_plugin.main`` and
``kubelet_plugin.servicer``; ``kubelet_plugin.monitoring`` reads its request vocabulary
(``requests.ClaimRef``, ``Outcome``, ``ClaimReader``), never the reverse.
"""
