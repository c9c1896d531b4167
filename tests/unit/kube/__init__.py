"""Unit tests of kube."""
