"""`python -m sheaf.cli`: the console script."""
from sheaf.cli.app import main

raise SystemExit(main())
