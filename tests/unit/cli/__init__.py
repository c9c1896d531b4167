"""Unit tests of cli."""
