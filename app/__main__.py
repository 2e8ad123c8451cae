"""`python -m app` runs the command line (see app.cli)."""

from app.cli import main

raise SystemExit(main())
