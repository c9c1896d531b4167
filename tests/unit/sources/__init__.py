"""Unit tests of sources."""
