"""The Postgres storages of Sheaf's dagster.yaml on Postgres (`home_files.postgres_dagster_yaml`):
Dagster's own (dagster-postgres), made on first use so the SQLite default never imports it."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pipelines.dagster_internals.storage_base import PartitionsSnapshot, check_evaluations, known_table
from sheaf.core.lazy import lazy_module

#: `dagster-postgres` (the `sheaf[postgres]` extra), imported only when a dagster.yaml names one of
#: the Postgres storages below: the SQLite default never loads it.
_dagster_postgres = lazy_module("dagster_postgres")


#: Connections each Postgres storage keeps open for the process (plus this many more at a burst).
#: Dagster nests connections (an event's insert, then its asset rows): with one kept, every nested
#: one was a new server connection, opened and closed (410 for a 50-paper rebuild; now 9).
_PG_POOL_SIZE = 4
_PG_POOL_OVERFLOW = 4


def _postgres_storages() -> dict[str, type]:
    """Dagster's Postgres run, event log and schedule storages, made on first use (so importing this
    module never imports dagster-postgres), with two changes:

    - the psycopg2 driver, which dagster-postgres depends on, named in the URL: SQLAlchemy 2.1 takes
      psycopg 3 for a plain ``postgresql://`` URL, and dagster-postgres' connection set-up (``with
      conn:``) closes a psycopg 3 connection (every statement then fails: "the connection is closed");
    - a connection pool kept for the process: Dagster's own open a new server connection (NullPool)
      for every statement outside the webserver, and a connection is a server process started.

    The event log also plans one event per asset for a run over a range of papers, as `_PooledSqlite`."""
    pg = _dagster_postgres
    utils = lazy_module("dagster_postgres.utils")

    def driver(url: str) -> str:
        for scheme in ("postgresql://", "postgres://"):
            if url.startswith(scheme):
                return "postgresql+psycopg2://" + url[len(scheme):]
        return url

    def pooled(storage: Any) -> None:
        storage._engine = utils.create_pg_engine(storage.postgres_url, storage._token_provider,
                                                 isolation_level="AUTOCOMMIT", pool_size=_PG_POOL_SIZE,
                                                 pool_recycle=3600, max_overflow=_PG_POOL_OVERFLOW,
                                                 pool_pre_ping=True)

    def init(base: type) -> Any:
        def __init__(self: Any, postgres_url: str, *args: Any, **kwargs: Any) -> None:
            base.__init__(self, driver(postgres_url), *args, **kwargs)
            pooled(self)
        return __init__

    def from_config(cls: Any, inst_data: Any, config_value: Mapping[str, Any]) -> Any:
        return cls(utils.pg_url_from_config(config_value), inst_data=inst_data,
                   should_autocreate_tables=config_value.get("should_autocreate_tables", True),
                   token_provider=utils.get_token_provider_from_config(config_value))

    def for_webserver(self: Any, statement_timeout: int, pool_recycle: int, max_overflow: int) -> None:
        pooled(self)  # already pooled; Dagster's version would set a timeout through ``with conn:``

    def planned_subsets(self: Any) -> bool:
        return True

    def has_table(self: Any, table_name: str) -> bool:
        """Asked on every asset event (a catalogue query each time: 1.8 s of a 50-paper rebuild)."""
        return known_table(self, table_name, lambda name: pg.PostgresEventLogStorage.has_table(self, name))

    def store_event_batch(self: Any, events: Sequence[Any]) -> None:
        """Dagster's Postgres batch writer takes materializations and observations only (another
        batch fails its check, then goes event by event with a message on stderr): a batch of check
        evaluations (`logcheck_evaluations`) goes event by event here."""
        if check_evaluations(events):
            for e in events:
                self.store_event(e)
            return
        pg.PostgresEventLogStorage.store_event_batch(self, events)

    made: dict[str, type] = {}
    for name, base in (("SheafPostgresEventLogStorage", pg.PostgresEventLogStorage),
                       ("SheafPostgresRunStorage", pg.PostgresRunStorage),
                       ("SheafPostgresScheduleStorage", pg.PostgresScheduleStorage)):
        body: dict[str, Any] = {"__init__": init(base), "from_config_value": classmethod(from_config),
                                "optimize_for_webserver": for_webserver, "__module__": __name__}
        if base is pg.PostgresEventLogStorage:
            body["supports_partition_subset_in_asset_materialization_planned_events"] = property(planned_subsets)
            body["has_table"] = has_table
            body["store_event_batch"] = store_event_batch
        made[name] = type(name, (PartitionsSnapshot, base) if base is pg.PostgresEventLogStorage else (base,), body)
    return made


_PG_STORAGES = ("SheafPostgresEventLogStorage", "SheafPostgresRunStorage", "SheafPostgresScheduleStorage")


def __getattr__(name: str) -> Any:
    """The Postgres storage classes, by name (how Dagster's instance loader reads a dagster.yaml's
    `module` + `class`), made on first access."""
    if name in _PG_STORAGES:
        globals().update(_postgres_storages())
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
