"""``python -m bench.cluster_scale``: see ``bench.cluster_scale``."""

from bench.cluster_scale.cli import main

raise SystemExit(main())
