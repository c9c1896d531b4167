"""Unit tests of appkit."""
