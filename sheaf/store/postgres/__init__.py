"""The Postgres + pgvector index backend (reached only through `sheaf.store.select` for a postgresql:// URL)."""
