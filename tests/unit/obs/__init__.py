"""Unit tests of obs."""
