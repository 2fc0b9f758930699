"""`sheaf build` and `sheaf doctor` on the Dagster side: runs, workers, the build lock, sync."""
