"""Unit tests of the kubelet plugin, in folders that mirror its wings (``prepare``, ``monitoring``)."""
