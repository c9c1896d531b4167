"""The dra-gpu kubelet plugin: registration and DRA gRPC services on unix sockets."""
