"""The `sheaf` command line: argument parsing and rendering only."""
