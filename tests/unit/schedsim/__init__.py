"""Unit tests of schedsim."""
