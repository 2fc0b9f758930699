"""The one partitions definition: one dynamic partition per paper, keyed by its Zotero key."""
from __future__ import annotations

from dagster import DynamicPartitionsDefinition

from sheaf.core.models import valid_paper_key

papers_partitions = DynamicPartitionsDefinition(name="papers")


def split_valid_keys(keys: list[str]) -> tuple[list[str], list[str]]:
    """(valid, invalid) paper keys: `^[A-Za-z0-9._-]+$` and no `..` (Dagster does not check)."""
    valid = [k for k in keys if valid_paper_key(k)]
    invalid = [k for k in keys if not valid_paper_key(k)]
    return valid, invalid
