"""Run directories: config, manifest, tables, arrays and resumable per-sample shards."""

from typing import TYPE_CHECKING

from mechscope.lazy import lazy_package

if TYPE_CHECKING:  # the exports, each imported on first use (mechscope.lazy)
    from mechscope.runs.atomic import (
        atomic_path,
        atomic_write_bytes,
        atomic_write_json,
        atomic_write_text,
    )
    from mechscope.runs.fingerprint import weights_fingerprint
    from mechscope.runs.rundir import RunDir
    from mechscope.runs.shards import ShardStore, shard_stem
    from mechscope.runs.shared_work import run_sharded
    from mechscope.runs.tables import (
        has_arrays,
        has_table,
        read_arrays,
        read_table,
        table_intact,
        write_arrays,
        write_table,
    )

__all__ = [
    "RunDir",
    "ShardStore",
    "atomic_path",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "has_arrays",
    "has_table",
    "read_arrays",
    "read_table",
    "run_sharded",
    "shard_stem",
    "table_intact",
    "weights_fingerprint",
    "write_arrays",
    "write_table",
]

lazy_package(__name__)
