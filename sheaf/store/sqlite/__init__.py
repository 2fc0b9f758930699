"""The SQLite index: connection, schema and migrations, writes, reads, integrity."""
