"""What the dra-gpu apps share; apps import it, it imports no app.

Common flags with env defaults, stop signals, the daemon entry point, the node's publication
and the ResourceSlice publisher (used by the standalone controller and the kubelet plugin).
"""
