"""The kubelet plugin's monitoring wing: what the plugin watches and reports beside prepare.

Device health (``health_monitor``, streamed to the kubelet by ``health_stream``, published as
taints by ``health_taints``), GPU usage per claim (``usage``, with the pods of ``pod_notes``)
and the claims' device status (``device_status``). Wired by ``kubelet_plugin.main``; it uses the
prepare wing's request vocabulary (``kubelet_plugin.prepare.requests``) and nothing else of it.
"""
