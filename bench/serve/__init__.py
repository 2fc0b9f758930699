"""Benchmarks of the servers agents and PaperForge use: MCP, the plugin's polls."""
