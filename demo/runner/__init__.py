"""The demo runner: an installed chart on a local cluster with real containers, told as a story (``make demo``)."""
