"""Unit tests of gpu_check."""
