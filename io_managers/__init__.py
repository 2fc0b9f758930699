"""io_managers."""
