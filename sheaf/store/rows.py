"""The rows both index backends write and read: a unit's columns and JSON fields, the full-text
rows of each FTS table, the checks a paper's units and passages pass before they are written,
and the paper filters of a query. One definition, so that SQLite and Postgres hold and answer
the same things (`sheaf.store.sqlite`, `sheaf.store.postgres`)."""
from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sheaf.core.envelope import SheafError
from sheaf.core.lazy import lazy_module
from sheaf.core.models import BodyUnit, ObjectUnit, valid_paper_key
from sheaf.core.text import fold
from sheaf.store.fulltext import fts_text
from sheaf.vectors.identity import EmbeddedPassages, ModelChangedError

if TYPE_CHECKING:  # pragma: no cover - value types only
    from sheaf.core.models import PaperMeta
    from sheaf.vectors.identity import ModelIdentity

np = lazy_module("numpy")  # imported on first use: the lexical query path never needs it
hashlib = lazy_module("hashlib")  # its OpenSSL backend costs ~3-5 ms to load


def body_fts_row(rowid: int, section_path: Sequence[str], text: str, title: str | None) -> tuple[Any, ...]:
    return (rowid, fts_text(" > ".join(section_path)), fts_text(text), fts_text(title))


def object_fts_row(rowid: int, caption: str | None, label: str | None, table_text: str | None,
                    nearby_text: str | None, title: str | None) -> tuple[Any, ...]:
    return (rowid, fts_text(caption), fts_text(label), fts_text(table_text), fts_text(nearby_text),
            fts_text(title))


def papers_fts_row(rowid: int, has_metadata: int, title: str | None, authors: str | None,
                    abstract: str | None, journal: str | None, domain: str | None,
                    year: int | None) -> tuple[Any, ...]:
    if not has_metadata:  # a stub: indexed empty (its title, if any, is not metadata)
        return (rowid, "", "", "", "", "", "")
    return (rowid, fts_text(title), fts_text("; ".join(json.loads(authors or "[]"))), fts_text(abstract),
            fts_text(journal), fts_text(domain), str(year) if year is not None else "")


class IndexSchemaError(SheafError):
    """The index file was written by another (older without a migration, or newer) version,
    or is not a Sheaf index at all. Never misread: refused with this error."""

    def __init__(self, message: str, details: dict[str, Any] | None = None,
                 hint: str | None = None) -> None:
        super().__init__("BACKEND_UNAVAILABLE", message, details, hint=hint)


#: The columns a unit row is compared on: all but the rowid and the short id, which the index assigns.
BODY_CONTENT = ("unit_id, paper_id, node_id, section_path, section_level, page_start, page_end, block_ids, "
                "text, token_count, unit_kind, part_ordinal")


OBJECT_CONTENT = ("unit_id, paper_id, object_kind, label, caption, table_text, nearby_text, node_id, section_path, "
                  "page, block_ids")


#: The columns a passage row is compared on (then its vector, byte for byte).
PASSAGE_CONTENT = "passage_id, unit_id, unit_type, ordinal, char_start, char_end, text_sha256"


@dataclass(frozen=True, slots=True)
class ReplaceStats:
    """What one `replace_paper` wrote (and deleted)."""

    paper_id: str
    deleted_units: int
    body_units: int
    object_units: int
    passages: int
    short_ids_lengthened: int
    seconds: float
    #: The index already held exactly these rows (and their FTS rows): nothing was written.
    unchanged: bool = False


def passages_list(passages: EmbeddedPassages | Sequence[EmbeddedPassages] | None) -> list[EmbeddedPassages]:

    if passages is None:
        return []
    if isinstance(passages, EmbeddedPassages):
        return [passages]
    return list(passages)


def json_text(v: Any) -> str:
    return json.dumps(list(v), ensure_ascii=False)


def meta_sha(m: PaperMeta) -> str:
    return str(hashlib.sha256(json.dumps(m.to_dict(), sort_keys=True, ensure_ascii=False)
                          .encode("utf-8")).hexdigest())


def validate_paper(paper_id: str, units: Sequence[BodyUnit], objects: Sequence[ObjectUnit],
              passages: Sequence[EmbeddedPassages]) -> None:
    """One paper's rows before they are written: its key, its units' owner and ids, its passages'
    units and vectors (the units' kinds are `as_units`' to check)."""
    if not valid_paper_key(paper_id):
        raise ValueError(f"invalid paper id {paper_id!r}")
    ids: set[str] = set()
    everything: list[BodyUnit | ObjectUnit] = [*units, *objects]
    for u in everything:
        if u.paper_id != paper_id:
            raise ValueError(f"unit {u.unit_id} belongs to paper {u.paper_id}, not {paper_id}")
        if u.unit_id in ids:
            raise ValueError(f"duplicate unit_id {u.unit_id}")
        ids.add(u.unit_id)
    seen_models: set[str] = set()
    for ep in passages:
        if ep.identity.key in seen_models:
            raise ValueError(f"two passage sets for one model {ep.identity.key}")
        seen_models.add(ep.identity.key)
        if not np.all(np.isfinite(ep.vectors)):
            raise ValueError("vectors contain NaN or infinity")
        pids: set[str] = set()
        for p in ep.passages:
            if p.paper_id != paper_id or p.unit_id not in ids:
                raise ValueError(f"passage {p.passage_id} does not belong to a unit of {paper_id}")
            if p.passage_id in pids:
                raise ValueError(f"duplicate passage_id {p.passage_id}")
            pids.add(p.passage_id)


TUPLE_FIELDS = ("section_path", "block_ids", "page_span")


def as_unit(u: BodyUnit | ObjectUnit | Mapping[str, Any]) -> BodyUnit | ObjectUnit:
    """A unit from a dataclass or from its `to_dict()`/Parquet row form (lists become tuples)."""
    if isinstance(u, (BodyUnit, ObjectUnit)):
        return u
    if not isinstance(u, Mapping):
        raise TypeError(f"not a unit: {type(u).__name__}")
    d: dict[str, Any] = {k: (tuple(v) if k in TUPLE_FIELDS and v is not None else v) for k, v in u.items()}
    cls: type[BodyUnit] | type[ObjectUnit] = ObjectUnit if "object_kind" in d else BodyUnit
    names = cls.__dataclass_fields__
    return cls(**{k: v for k, v in d.items() if k in names})


UnitInput = BodyUnit | ObjectUnit | Mapping[str, Any]


def as_units(units: Iterable[UnitInput], objects: Iterable[UnitInput]
             ) -> tuple[list[BodyUnit], list[ObjectUnit]]:
    """A paper's body units and object units from dataclasses or their row form; a unit of the
    wrong kind in either list is a TypeError."""
    body, objs = [as_unit(u) for u in units], [as_unit(o) for o in objects]
    for u in body:
        if not isinstance(u, BodyUnit):
            raise TypeError(f"units must be BodyUnit, got {type(u).__name__}")
    for o in objs:
        if not isinstance(o, ObjectUnit):
            raise TypeError(f"objects must be ObjectUnit, got {type(o).__name__}")
    return [u for u in body if isinstance(u, BodyUnit)], [o for o in objs if isinstance(o, ObjectUnit)]


def body_row(u: BodyUnit) -> tuple[Any, ...]:
    """A body unit as its `BODY_CONTENT` columns hold it."""
    ps = u.page_span or (None, None)
    return (u.unit_id, u.paper_id, u.node_id, json_text(u.section_path), u.section_level, ps[0], ps[1], json_text(u.block_ids),
            u.text, u.token_count, u.unit_kind, u.part_ordinal)


def object_row(o: ObjectUnit) -> tuple[Any, ...]:
    """An object unit as its `OBJECT_CONTENT` columns hold it."""
    return (o.unit_id, o.paper_id, o.object_kind, o.label, o.caption or "", o.table_text or "", o.nearby_text or "",
            o.node_id, json_text(o.section_path), o.page, json_text(o.block_ids))


def passage_rows(ep: EmbeddedPassages) -> list[tuple[Any, ...]]:
    """The passages as their `PASSAGE_CONTENT` columns hold them."""
    return [(p.passage_id, p.unit_id, p.unit_type, p.ordinal, p.char_start, p.char_end, p.text_sha256)
            for p in ep.passages]


def same_passages(old: Sequence[Sequence[Any]], ep: EmbeddedPassages, as_bytes: Any) -> bool:
    """Whether stored passage rows (`PASSAGE_CONTENT` then the vector, None where it is missing)
    are exactly `ep`, in order. `as_bytes(v)`: a stored vector's float32 bytes."""
    new = passage_rows(ep)
    if len(old) != len(new):
        return False
    vecs = np.ascontiguousarray(ep.vectors, dtype=np.float32)
    return all(tuple(o[:-1]) == n and o[-1] is not None and as_bytes(o[-1]) == vecs[i].tobytes()
               for i, (o, n) in enumerate(zip(old, new)))


def units_held(conn: Any, paper_id: str, body: Sequence[tuple[Any, ...]], objects: Sequence[tuple[Any, ...]], *,
               mark: str = "?", order: str = "unit_rowid") -> bool:
    """Whether the paper's unit rows are exactly `body` and `objects` (`body_row` / `object_row`
    tuples), in this order. Either backend's connection: `mark` is its placeholder, `order` the
    column that keeps write order."""
    for table, cols, new in (("body_units", BODY_CONTENT, body), ("object_units", OBJECT_CONTENT, objects)):
        old = conn.execute(f"SELECT {cols} FROM {table} WHERE paper_id = {mark} ORDER BY {order}",
                           (paper_id,)).fetchall()
        if len(old) != len(new) or any(tuple(o) != n for o, n in zip(old, new)):
            return False
    return True


def unchanged_unit_ids(old: dict[str, tuple[Any, ...]], units: Sequence[BodyUnit], objects: Sequence[ObjectUnit]) -> set[str]:
    """The ids of `units`/`objects` whose signature equals the stored one in `old` ({unit id:
    ("b", text, section_path json) or ("o", caption, label, table_text, nearby_text, section_path
    json)}, as both index backends read it)."""
    if not old:
        return set()
    new: dict[str, tuple[Any, ...]] = {u.unit_id: ("b", u.text, json_text(u.section_path)) for u in units}
    new.update({o.unit_id: ("o", o.caption or "", o.label, o.table_text or "", o.nearby_text or "",
                            json_text(o.section_path)) for o in objects})
    return {uid for uid, sig in new.items() if old.get(uid) == sig}


BODY_COLS = ("unit_id, short_id, paper_id, node_id, section_path, section_level, page_start, "
              "page_end, block_ids, text, token_count, unit_kind, part_ordinal")


OBJECT_COLS = ("unit_id, short_id, paper_id, object_kind, label, caption, table_text, nearby_text, "
             "node_id, section_path, page, block_ids")


def body_from_row(r: Sequence[Any]) -> BodyUnit:
    return BodyUnit(unit_id=r[0], short_id=r[1], paper_id=r[2], node_id=r[3],
                    section_path=tuple(json.loads(r[4])), section_level=r[5],
                    page_span=(r[6], r[7]) if r[6] is not None else None,
                    block_ids=tuple(json.loads(r[8])), text=r[9], token_count=r[10],
                    unit_kind=r[11], part_ordinal=r[12])


def object_from_row(r: Sequence[Any]) -> ObjectUnit:
    return ObjectUnit(unit_id=r[0], short_id=r[1], paper_id=r[2], object_kind=r[3], label=r[4],
                      caption=r[5], table_text=r[6], nearby_text=r[7], node_id=r[8],
                      section_path=tuple(json.loads(r[9])), page=r[10],
                      block_ids=tuple(json.loads(r[11])))


def collection_segments(rows: Iterable[str]) -> set[str]:
    """Every segment of every collection path in `rows` (the papers' `collections` JSON lists:
    "Library/Ecology" → Library, Ecology), as both index backends report them."""
    out: set[str] = set()
    for cols in rows:
        for path in json.loads(cols):
            out.update(p for p in path.split("/") if p)
    return out


def filter_papers(rows: Sequence[Sequence[Any]], *, collections: Sequence[str] | None = None,
                  authors: Sequence[str] | None = None, tags: Sequence[str] | None = None) -> list[str]:
    """The ids of ``(paper_id, collections JSON, authors JSON, tags JSON)`` rows passing the
    `collections`, `authors` and `tags` filters of `paper_ids_where` (every backend filters with
    this one function)."""
    if collections:
        wanted = ["/" + "/".join(p.strip() for p in fold(c).split("/")) + "/" for c in collections]
        rows = [r for r in rows if any(w in "/" + fold(path) + "/" for path in json.loads(r[1] or "[]")
                                       for w in wanted)]
    if authors:
        pats = [re.compile(r"(?<![^\W_])" + re.escape(fold(a.strip()))) for a in authors if a.strip()]
        rows = [r for r in rows if any(p.search(fold(name)) for name in json.loads(r[2] or "[]") for p in pats)]
    if tags:
        wanted_tags = {fold(t.strip()) for t in tags if t.strip()}
        rows = [r for r in rows if any(fold(t) in wanted_tags for t in json.loads(r[3] or "[]"))]
    return [r[0] for r in rows]


def query_collection(cols: dict[str, ModelIdentity], ident: ModelIdentity) -> ModelIdentity:
    """The index's collection for a query embedded with `ident` (`cols`: every collection of the
    index, either backend): VECTOR_NOT_BUILT when it has none, `ModelChangedError`
    (``MODEL_CHANGED``) when none is of the query's model."""
    if ident.key not in cols:
        if not cols:
            raise SheafError("VECTOR_NOT_BUILT", "the index has no vectors yet",
                             hint="build the index (sheaf build)")
        raise ModelChangedError(
            f"the query was embedded with {ident.describe()}, but the index holds vectors of "
            + "; ".join(c.describe() for c in cols.values()),
            {"query_model": ident.to_dict(), "index_models": [c.to_dict() for c in cols.values()]},
            hint="set SHEAF_EMBEDDING_MODEL back, or rebuild the vectors with the new model")
    if cols[ident.key] != ident:
        raise ModelChangedError("collection key collision between two model identities",
                                {"key": ident.key})
    return cols[ident.key]


def year_clauses(year_min: int | None, year_max: int | None, mark: str = "?") -> tuple[list[str], list[Any]]:
    """The WHERE clauses (ANDed; always at least one) and arguments of a year range, for either
    backend (`mark`: its parameter placeholder)."""
    where, args = ["1 = 1"], []
    if year_min is not None:
        where.append(f"year >= {mark}")
        args.append(int(year_min))
    if year_max is not None:
        where.append(f"year <= {mark}")
        args.append(int(year_max))
    return where, args


def unchanged_units(conn: Any, paper_id: str, units: Sequence[BodyUnit],
                    objects: Sequence[ObjectUnit], mark: str = "?") -> set[str]:
    """Unit ids whose indexed text (and section path, caption, label ...) a replace leaves as
    they are: their passages and vectors stay valid (the vector step re-checks them next). Either
    backend's connection: `mark` is its parameter placeholder ("?" for SQLite, "%s" for Postgres)."""
    old: dict[str, tuple[Any, ...]] = {}
    for uid, text, path in conn.execute(
            f"SELECT unit_id, text, section_path FROM body_units WHERE paper_id = {mark}", (paper_id,)):
        old[uid] = ("b", text, path)
    for uid, cap, label, tt, near, path in conn.execute(
            "SELECT unit_id, caption, label, table_text, nearby_text, section_path FROM object_units "
            f"WHERE paper_id = {mark}", (paper_id,)):
        old[uid] = ("o", cap, label, tt, near, path)
    return unchanged_unit_ids(old, units, objects)
