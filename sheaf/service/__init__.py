"""Service layer: commands (typed request -> envelope) shared by the CLI and the server."""
