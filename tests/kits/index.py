"""Small indexes written directly for the store and search tests: vectors by the row, a schema-1
file as Sheaf 1 made it, a paper's units with a variant."""
from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np

from sheaf.core.models import BodyUnit, ObjectUnit
from sheaf.store.sqlite import schema as ix
from sheaf.store.sqlite.db import connect
from sheaf.vectors.identity import ModelIdentity
from tests.kits.papers import body_unit, object_unit


def write_vector_index(path: Path, X: np.ndarray, papers: int, ident: ModelIdentity) -> None:
    """An index whose collection `ident` holds the rows of `X`, one passage (and unit) each,
    spread round-robin over `papers` papers P000, P001, ..."""
    conn = ix.open_index(path)
    ix.ensure_collection(conn, ident)
    n = len(X)
    with ix.transaction(conn):
        conn.executemany("INSERT INTO papers(paper_id) VALUES (?)", [(f"P{i:03d}",) for i in range(papers)])
        conn.executemany(f"INSERT INTO {ident.passages_table}(passage_rowid, passage_id, unit_id, unit_type, "
                         "paper_id, ordinal, char_start, char_end, text_sha256) VALUES (?,?,?,?,?,?,?,?,?)",
                         [(i + 1, f"u{i}#0", f"u{i}", "body", f"P{i % papers:03d}", 0, 0, 1, "x")
                          for i in range(n)])
        conn.executemany(f"INSERT INTO {ident.vec_table}(passage_rowid, embedding, paper_id) VALUES (?,?,?)",
                         [(i + 1, X[i].tobytes(), f"P{i % papers:03d}") for i in range(n)])
    conn.close()


def schema1_file(path):
    """A connection to a new index file of schema 1 (no rows), as Sheaf 1 made them."""
    c = connect(path)
    for stmt in ix._statements(ix.SCHEMA_V1):
        c.execute(stmt)
    c.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    return c


UNIT_TEXTS = [
    "We study bone regeneration with collagen scaffolds; cross-linking at 37 °C was stable.",
    "The inhibitor SPG302 (also written SPG-302 or SPG 302, and SPG‑302) restored synaptic density.",
    "Café-style assays of naïve mice: the regenerating tissue regenerates faster than controls.",
    "骨再生的研究表明支架有效。Gene expression in cells rose after treatment with QLN482.",
    "Methods: hyphenated terms such as dose-response and T-cell counts; studies of studied studies.",
]


_body = partial(body_unit, short_id_len=4, pages=(1, 2), blocks="p1:{node}")
_obj = partial(object_unit, short_id_len=0, nearby="as shown in the figure")


def paper_units(pid: str, variant: str = "a") -> tuple[list[BodyUnit], list[ObjectUnit]]:
    """A paper's units (the texts of UNIT_TEXTS, each marked with `variant`) and two objects."""
    units = [_body(pid, f"s{i}", f"{t} ({variant})", ("Methods" if i % 2 else "Results",)) for i, t in enumerate(UNIT_TEXTS)]
    objects = [_obj(pid, "p2:3", f"Figure 1. Dose-response of the scaffold ({variant})."),
               _obj(pid, "p3:1", "Table 1. Cohort.", "table", "age | n\n30 | 12")]
    return units, objects
