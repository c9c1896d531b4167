"""The test kit: what tests/, e2e/ and bench/ share, below all three.

A real local Kubernetes control plane built from source (cluster, node, runtime_node,
node_state, installed), the plugin and the Go reference driver as processes (plugin_process,
peer_process), the Helm CLI (helm_cli), Kueue's manager (kueue), claim and AdmissionReview builders (claimdata, claims,
admission), webhook certificates, a fake NVIDIA userspace (fake_driver), the differential
oracle against Go's DRA code (oracle/), the real-GPU check's pieces (gpu_check/) and the Go
programs and build scripts (go/). tests/, e2e/ and bench/ import this and the product, never
each other (.importlinter).
"""
