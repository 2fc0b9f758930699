"""Planning: what each paper needs, read from Dagster's records or proved without Dagster."""
