"""Index group: each paper's rows in the FTS tables and its vectors, plus library metadata.

Writers go through the index backend (`sheaf.store.backend.IndexBackend`: one transaction per
paper) and share the `sheaf_index` pool, so two runs never write the SQLite file at once (on
Postgres, writers of different papers may run at once: every row key holds the paper).
"""
from typing import Any

from dagster import AssetExecutionContext, AssetIn, MaterializeResult, MetadataValue, ResourceParam, asset

from assets._batch import run_per_paper
from assets.paper import COMMON
from pipelines.planning.versions import CODE_VERSIONS
from pipelines.resources import SheafConfig
from sheaf.core.envelope import SheafError
from sheaf.core.models import IngestError
from sheaf.core.progress import check_stop, phase
from sheaf.library.discover import discover_library
from sheaf.library.metadata import export_files_metadata, export_hash
from sheaf.store.artifacts import table_title, table_to_body_units, table_to_object_units
from sheaf.store.backend import IndexBackend
from sheaf.store.select import open_backend
from sheaf.vectors.embedder import Embedder
from sheaf.vectors.onnx_export import ensure_onnx_export

INDEX_POOL = "sheaf_index"
#: vector_collections' own code version (`pipelines.planning.versions`); the definitions add the configured
#: embedding model to it (`sheaf.vectors.identity.model_code_version`), so a model change is a code
#: change to Dagster.
VECTOR_CODE_VERSION = CODE_VERSIONS["vector_collections"]


def _open(settings: Any) -> IndexBackend:
    """The index the build writes, SQLite or Postgres (`sheaf.store.select`; created or migrated
    on first use)."""
    return open_backend(settings)


def _units(key: str, body_units: dict, object_units: dict):
    if key not in body_units or key not in object_units:
        raise IngestError(key, None, "no units artifact: an upstream step failed; its index rows were removed",
                          upstream=True)
    return table_to_body_units(body_units[key]), table_to_object_units(object_units[key])


@asset(ins={"body_units": AssetIn(), "object_units": AssetIn()}, group_name="index",
       code_version=CODE_VERSIONS["fts_tables"], pool=INDEX_POOL, **COMMON)
def fts_tables(context: AssetExecutionContext, sheaf: SheafConfig, body_units: dict[str, Any],
               object_units: dict[str, Any]) -> None:
    """The paper's rows in the SQLite FTS5 tables (units and objects), replaced in one transaction
    (left as they are when the index already holds exactly these units)."""
    index = _open(sheaf.settings())
    try:
        def one(key: str):
            try:
                units, objects = _units(key, body_units, object_units)
            except IngestError:
                # its old units go; its library metadata stays (the paper is still in the
                # library: `sheaf search` still finds it by title or author)
                index.remove_paper(key, prune_cache=False, keep_metadata=True)
                raise
            stats = index.replace_paper(key, units, objects)
            # (the paper's FTS rows are counted by its `fts_rows_match_units` check)
            return {}, {"body_units": stats.body_units, "object_units": stats.object_units,
                        "rows_unchanged": stats.unchanged, "replace_ms": round(stats.seconds * 1000, 2)}

        run_per_paper(context, context.partition_keys, one)
    finally:
        index.close()


#: New passages of consecutive papers are encoded together, up to about this many at a time:
#: batches of texts of similar lengths pad far less than one paper's mixed passages do
#: (measured: 1.5x faster than paper by paper; groups of 128 get 96% of encoding everything at
#: once). The group's papers still finish one by one (`Embedder.embed_papers`).
EMBED_GROUP_PASSAGES = 128

#: Papers whose unit texts are tokenized in one call when their passages are built (the
#: tokenizer costs less a text in bigger calls: 1.4 → 0.9-1.1 ms a paper of three abstracts).
PASSAGE_PAPERS = 32


@asset(ins={"body_units": AssetIn(), "object_units": AssetIn(), "ocr_blocks": AssetIn()},
       deps=["fts_tables"], group_name="index", code_version=VECTOR_CODE_VERSION, pool=INDEX_POOL, **COMMON)
def vector_collections(context: AssetExecutionContext, sheaf: SheafConfig, embedder: ResourceParam[Embedder],
                       body_units: dict[str, Any], object_units: dict[str, Any], ocr_blocks: dict[str, Any]) -> None:
    """The paper's passages and vectors in the current embedding model's sqlite-vec collection."""
    phase("loading the embedding model")
    embedder.load(poll=check_stop)  # a stop while the model loads (or is exported) ends the step at once
    phase("embedding")
    identity = embedder.identity
    if embedder.backend_note:
        context.log.warning(embedder.backend_note)
    index = _open(sheaf.settings())
    keys = list(context.partition_keys)
    # key -> (its embedded passages, the encode seconds spent on it) or its error
    prepared: dict[str, tuple[Any, float] | IngestError | SheafError] = {}
    # the group being embedded: its papers come out one by one, each as soon as its vectors are there
    group_stream: list[Any] = []

    # key -> its passages or its error, built PASSAGE_PAPERS papers at a time
    built: dict[str, list | IngestError | SheafError] = {}

    def passages_of(key: str) -> list:
        if key not in built:
            todo: list[tuple[str, tuple]] = []
            for k in keys[keys.index(key):][:PASSAGE_PAPERS]:
                try:
                    units, objects = _units(k, body_units, object_units)
                    todo.append((k, (units, objects, table_title(ocr_blocks[k]) if k in ocr_blocks else None)))
                except (IngestError, SheafError) as e:
                    built[k] = e
            if todo:
                built.update(zip([k for k, _ in todo], embedder.build_passages_of_papers([p for _, p in todo])))
        item = built.pop(key)
        if isinstance(item, Exception):
            raise item
        return item

    def prepare(first: str) -> None:
        """Passages of `first` and the papers after it (up to EMBED_GROUP_PASSAGES), embedded as
        one group (`Embedder.embed_papers`: one cache read, the new passages encoded together in
        batches of similar lengths, `first`'s first), handed out paper by paper as each is done:
        the build reports every paper as its vectors are written, not the group at its end."""
        group: list[tuple[str, list]] = []
        size = 0
        for key in keys[keys.index(first):]:
            if group and size >= EMBED_GROUP_PASSAGES:
                break
            try:
                passages = passages_of(key)
            except (IngestError, SheafError) as e:  # this paper fails alone (in `one`)
                prepared[key] = e
                continue
            group.append((key, passages))
            size += len(passages)
        # a stop asked for meanwhile ends the step between two batches: the paper being encoded
        # writes nothing (the papers handed out before it are written already)
        group_stream[:] = [embedder.embed_papers(group, index.embedding_cache(), between_batches=check_stop)]

    def next_of(key: str) -> None:
        """Embed until `key` is prepared (its group's earlier papers come first)."""
        while key not in prepared:
            item = next(group_stream[0], None) if group_stream else None
            if item is None:
                prepare(key)
                continue
            done, embedded, seconds = item
            prepared[done] = (embedded, seconds)

    try:
        def one(key: str):
            next_of(key)
            item = prepared.pop(key)
            if isinstance(item, Exception):
                raise item
            embedded, embed_s = item
            n = index.replace_paper_vectors(key, embedded)
            return {}, {"passages": n, "embeddings_computed": embedded.encoded,
                        "embeddings_reused": n - embedded.encoded, "model": identity.name,
                        "model_identity": identity.key, "embed_backend": embedder.backend,
                        "embed_device": embedder.resolved_device or "cpu",
                        "embed_ms": round(embed_s * 1000, 1)}

        run_per_paper(context, keys, one)
    finally:
        index.close()
    try:  # the light query encoder (sheaf.vectors.query_encoder): cheap when present, never fails the step
        ensure_onnx_export(embedder, sheaf.settings())
    except Exception as e:  # noqa: BLE001
        context.log.warning(f"ONNX query encoder not exported ({type(e).__name__}: {e}); "
                            "queries will use sentence-transformers")


@asset(group_name="source", code_version="1", pool=INDEX_POOL)
def library_metadata(context: AssetExecutionContext, sheaf: SheafConfig) -> MaterializeResult:
    """Paper metadata from the library's Better BibTeX / CSL-JSON exports: the papers table and its FTS."""
    settings = sheaf.settings()
    files = discover_library(settings).metadata_files
    load = export_files_metadata(files)
    # Papers the export no longer lists lose their metadata, but only when every export file
    # was read: an unreadable or missing export (mid-rewrite by Zotero) must not strip the index.
    unread = [w for w in load.warnings if w.item == "-"]
    index = _open(settings)
    try:
        stats = index.upsert_papers(load.papers)
        if files and not unread:
            stats.update(index.prune_metadata([m.key for m in load.papers]))
    finally:
        index.close()
    if not files or unread:
        context.log.warning("metadata of papers missing from the export kept: "
                            + ("no export file found" if not files else f"{len(unread)} export file(s) unreadable"))
    for w in load.warnings:
        context.log.warning(str(w))
    return MaterializeResult(metadata={
        "export_files": MetadataValue.json([str(f) for f in files]),
        "export_hash": export_hash(files), "papers": len(load.papers), **stats,
        "skipped_non_papers": load.skipped_non_papers,
        "warnings": MetadataValue.json([str(w) for w in load.warnings][:50]),
    })
