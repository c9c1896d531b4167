"""``python -m bench.soak`` (``make soak``): see ``bench.soak``."""

from bench.soak.run import main

raise SystemExit(main())
