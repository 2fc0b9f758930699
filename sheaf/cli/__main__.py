"""`python -m sheaf.cli`: the console script."""
from sheaf.cli.app import console

console()
