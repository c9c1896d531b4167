"""Unit tests of the kubelet plugin's prepare wing (``kubelet_plugin.prepare``)."""
