"""Unit tests of files."""
