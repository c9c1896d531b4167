"""End-to-end tests: a real local Kubernetes control plane built from source (testkit/), the chart installed on it."""
