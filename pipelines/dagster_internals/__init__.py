"""Every use of Dagster's private API and of its storage's tables, behind one wall."""
