"""`pipelines.state.latest_events` reads a paper's latest events as stored (plain JSON), and gives
exactly what Dagster's own read gives: on a built home's chain, and on an asset whose metadata
holds every kind of value (those the plain reader does not know go through Dagster's deserializer).
"""
from __future__ import annotations

import math

import pytest

from tests.pipeline_kit import CHAIN, Home, built_base, clone, instance


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return built_base(tmp_path_factory)


@pytest.fixture
def home(base, tmp_path, monkeypatch) -> Home:
    return clone(base[0], tmp_path / "h").apply(monkeypatch)


def dagsters_read(inst, asset: str, kind: str, partitions: list[str]) -> dict:
    """The latest events per partition through Dagster's public records API (what
    `latest_events` read before it read the stored JSON), in `EventInfo`s."""
    from dagster import AssetKey, AssetRecordsFilter, DagsterEventType

    from pipelines.dagster_private import latest_storage_ids
    from pipelines.state import EventInfo

    key = AssetKey(asset)
    et = DagsterEventType.ASSET_MATERIALIZATION if kind == "materialization" else DagsterEventType.ASSET_OBSERVATION
    ids = sorted(latest_storage_ids(inst, key, et, partitions).values())
    fetch = inst.fetch_materializations if kind == "materialization" else inst.fetch_observations
    out = {}
    for r in fetch(AssetRecordsFilter(asset_key=key, storage_ids=ids), limit=len(ids) + 1).records:
        ev = r.asset_materialization if kind == "materialization" else r.asset_observation
        out[r.partition_key] = EventInfo(r.partition_key, r.storage_id, r.timestamp, r.run_id,
                                         {k: getattr(v, "value", v) for k, v in (ev.metadata or {}).items()},
                                         dict(ev.tags or {}))
    return out


def test_the_chains_latest_events_read_as_stored_equal_dagsters_read(home):
    from pipelines.state import latest_events

    inst = instance()
    keys = list(inst.get_dynamic_partitions("papers"))
    for asset, kind in [*((a, "materialization") for a in CHAIN), ("ocr_result", "observation")]:
        got = latest_events(inst, asset, kind, partitions=keys)
        assert got == dagsters_read(inst, asset, kind, keys), asset
        assert set(got) == set(keys), asset
    assert latest_events(inst, CHAIN[0], partitions=keys[:1]).keys() == {keys[0]}


def test_the_chains_events_are_read_without_dagsters_deserializer(home, monkeypatch):
    """What makes the read cheap: Sheaf's own events are plain JSON to it. Dagster's deserializer
    built every object of each event (~2 ms a paper for a status read, measured in session 15)."""
    import dagster._core.storage.event_log.sql_event_log as sql_event_log

    import pipelines.state as state

    def refuse(*a, **kw):
        raise AssertionError("an event went through Dagster's deserializer")

    inst = instance()
    keys = list(inst.get_dynamic_partitions("papers"))
    monkeypatch.setattr(sql_event_log, "deserialize_value", refuse)
    monkeypatch.setattr(state, "deserialize_value", refuse, raising=False)
    got = state.latest_events(inst, "vector_collections", partitions=keys)
    assert set(got) == set(keys) and all(e.metadata.get("passages") for e in got.values())
    assert all(e.code_version and e.data_version for e in got.values())


def test_every_kind_of_metadata_value_reads_as_dagster_reads_it(home):
    """Values the plain reader knows (text, empty text, int, float, NaN, bool, JSON, Markdown, URL,
    path) and values it does not (a table, a null, a timestamp, an asset key): every event reads
    as Dagster reads it, the unknown ones through its deserializer."""
    from dagster import (
        AssetKey, DynamicPartitionsDefinition, MetadataValue, TableColumn, TableRecord,
        TableSchema, asset, materialize,
    )

    from pipelines.dagster_private import plain_asset_event, stored_events
    from pipelines.state import latest_events

    inst = instance()
    keys = list(inst.get_dynamic_partitions("papers"))[:2]
    plain = {"text": "a title", "empty": MetadataValue.text(""), "int": 7, "float": 1.5, "nan": float("nan"),
             "bool": True, "json": {"list": [1, 2.5, None, {"x": "y"}], "n": 3}, "json_list": ["a"],
             "md": MetadataValue.md("# head"), "url": MetadataValue.url("https://example.org"),
             "path": MetadataValue.path("/tmp/x.parquet")}
    other = {**plain, "table": MetadataValue.table(records=[TableRecord({"a": 1})],
                                                   schema=TableSchema(columns=[TableColumn("a", "int")])),
             "null": MetadataValue.null(), "ts": MetadataValue.timestamp(1700000000.0),
             "asset": MetadataValue.asset(AssetKey("elsewhere"))}

    @asset(name="probe", partitions_def=DynamicPartitionsDefinition(name="papers"))
    def probe(context):
        context.add_output_metadata(plain if context.partition_key == keys[0] else other)
        return 1

    for key in keys:
        assert materialize([probe], instance=inst, partition_key=key).success
    got = latest_events(inst, "probe", partitions=keys)
    want = dagsters_read(inst, "probe", "materialization", keys)
    assert set(got) == set(keys)
    for key in keys:
        g, w = got[key], want[key]
        assert math.isnan(g.metadata.pop("nan")) and math.isnan(w.metadata.pop("nan"))
        assert g == w, key
    assert got[keys[0]].metadata["json"] == plain["json"] and got[keys[0]].metadata["empty"] == ""
    by_partition = {}
    for sid, stored in stored_events(inst, sorted(e.storage_id for e in got.values())):
        by_partition[next(k for k, e in got.items() if e.storage_id == sid)] = plain_asset_event(
            stored, "ASSET_MATERIALIZATION")
    assert by_partition[keys[0]] is not None, "an event of plain values went through Dagster's deserializer"
    assert by_partition[keys[1]] is None, "values the plain reader does not know were read as plain"
    assert plain_asset_event(stored, "ASSET_OBSERVATION") is None  # not the kind asked for
    assert plain_asset_event("not json", "ASSET_MATERIALIZATION") is None
