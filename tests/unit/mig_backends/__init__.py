"""Unit tests of mig_backends."""
