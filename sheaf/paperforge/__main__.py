"""`python -m sheaf.paperforge --vault VAULT <command> ... --json`: the PaperForge plugin's entry
(`sheaf.paperforge.commands`; docs/paperforge.md)."""
from sheaf.core.heap import quick_exit
from sheaf.paperforge.commands import main

if __name__ == "__main__":
    raise SystemExit(quick_exit(main()))
