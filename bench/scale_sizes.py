"""Benchmark 10's sizes: the ledger's heap, TOAST and each index, in total and per run."""

from __future__ import annotations

from psycopg.rows import dict_row

from .common import check, conn, vacuum_analyze

RUNS = "scrinalia.archive_worker_runs"

RUN_COUNT_SQL = f"SELECT count(*) FROM {RUNS}"
TABLE_SIZES_SQL = f"""
SELECT pg_relation_size(t.oid) AS heap,
       coalesce(pg_total_relation_size(nullif(t.reltoastrelid, 0)), 0) AS toast,
       pg_indexes_size(t.oid) AS indexes,
       pg_total_relation_size(t.oid) AS total
  FROM pg_class t
 WHERE t.oid = '{RUNS}'::regclass
"""
INDEX_SIZES_SQL = f"""
SELECT i.indexrelid::regclass::text AS index_name, pg_relation_size(i.indexrelid) AS bytes
  FROM pg_index i
 WHERE i.indrelid = '{RUNS}'::regclass
 ORDER BY bytes DESC, index_name
"""


def sizes(dsn: str) -> dict:
    """The ledger's heap, TOAST, indexes and total, after VACUUM ANALYZE."""
    vacuum_analyze(dsn, RUNS)
    with conn(dsn) as c:
        cur = c.cursor(row_factory=dict_row)
        table = cur.execute(TABLE_SIZES_SQL).fetchone()
        indexes = cur.execute(INDEX_SIZES_SQL).fetchall()
        runs = c.execute(RUN_COUNT_SQL).fetchone()[0]
    check(runs > 0, "sizes of an empty ledger")
    return {**table, "indexes_each": [(i["index_name"], i["bytes"]) for i in indexes], "runs": runs}


def mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def per_run(n: int, runs: int) -> str:
    return f"{mib(n)}, {n / runs:,.1f} bytes per run"


def size_parts(size: dict) -> list[tuple[str, int]]:
    """The ledger's parts as the sizes table lists them: heap, TOAST, each index, all."""
    return [
        ("heap", size["heap"]),
        ("TOAST (table and index)", size["toast"]),
        *((f"index {name}", b) for name, b in size["indexes_each"]),
        ("all indexes", size["indexes"]),
        ("total (with the free space and visibility maps)", size["total"]),
    ]
