"""``python -m bench.peer`` (``make bench``): see ``bench.peer``."""

from bench.peer.cli import main

raise SystemExit(main())
