"""Sheaf's benchmarks, by stage. Each runs from the project root as a module:
`python -m bench.<stage>.<name>` (docs/benchmarks.md has each one's command and latest figures)."""
