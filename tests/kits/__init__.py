"""Helpers the tests share: papers and units, built homes, Dagster's private names, reliability
trials, Zotero data directories. Test modules import these, never one another."""
