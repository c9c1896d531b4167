"""End-to-end helpers: a real local Kubernetes control plane built from source."""
