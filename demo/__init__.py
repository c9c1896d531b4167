"""The demo: its manifests (demo/*.yaml) and its runner (``python -m demo.runner.demo``, what ``make demo`` runs)."""
