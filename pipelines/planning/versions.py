"""The code version of each per-paper chain asset, in one place: the asset decorators take
theirs from here, and the no-op proof (`pipelines.planning.noop`) reads them without importing
Dagster. Bump an asset's version when what it writes changes; every paper then rebuilds from
that asset down. `vector_collections` also carries the configured embedding model
(`sheaf.vectors.identity.model_code_version`), so a model change is a code change too;
`ocr_blocks` carries the OCR engine's identity the same way (`sheaf.formats.pdf.ocr`).

tests/pipelines/test_noop.py checks that the chain Dagster sees (`pipelines.planning.statuses.chain_of`)
has exactly these assets and versions.
"""
from __future__ import annotations

from sheaf.vectors.identity import model_code_version

CODE_VERSIONS: dict[str, str] = {
    "ocr_blocks": "1",
    "fulltext_markdown": "1",
    "render_map": "1",
    "structure_tree": "1",
    "body_units": "1",
    "object_units": "1",
    "fts_tables": "1",
    "vector_collections": "1",
}


def chain_code_versions(model: str, ocr: str = "") -> dict[str, str]:
    """Every chain asset's code version as the definitions make it for `model` and `ocr` (the OCR
    engine's `PageOcr.code_version`: "" when OCR is off). `ocr_blocks` carries the OCR engine, so a
    new engine (or SHEAF_OCR) re-reads the papers; the pages it read stay in the machine cache."""
    return {**CODE_VERSIONS, "ocr_blocks": CODE_VERSIONS["ocr_blocks"] + (f"+ocr.{ocr}" if ocr else ""),
            "vector_collections": model_code_version(CODE_VERSIONS["vector_collections"], model)}
