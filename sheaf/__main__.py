"""`python -m sheaf`: the console script."""
from sheaf.cli.app import console

console()
