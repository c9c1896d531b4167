"""Unit tests of sharing_backends."""
