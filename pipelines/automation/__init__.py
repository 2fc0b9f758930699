"""What runs without a command: the discovery and automation sensors, the nightly schedule."""
