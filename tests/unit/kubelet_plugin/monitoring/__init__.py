"""Unit tests of the kubelet plugin's monitoring wing (``kubelet_plugin.monitoring``)."""
