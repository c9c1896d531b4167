"""Unit tests of webhook."""
