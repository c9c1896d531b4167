"""Unit tests of core."""
