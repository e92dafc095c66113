"""Reading the jobs' Parquet outputs outside Spark: only the committed files.

The streaming job writes each micro-batch's Parquet files into the output folder, then commits
the batch by adding a file listing them to the folder's ``_spark_metadata`` log. A job killed
mid-batch (SIGKILL, a lost executor, an out-of-memory kill) leaves the files it had started:
empty (0-byte) ``part-*.parquet`` files and complete ones holding rows of a batch that was never
committed. Restarting on the same checkpoint runs that batch again into new files, so the output
stays exact for Spark's reader, which lists only the files in the log. Readers that list the
folder (pyarrow, pandas, DuckDB, Trino, ``parquet-tools``) see the leftovers too: a 0-byte file
fails them, a complete one duplicates rows.

:func:`committed_files` returns the files Spark would read, for any of them::

    import pyarrow.parquet as pq
    table = pq.read_table([str(p) for p in committed_files("out/spark/sessions")])

The batch job's output (written at once, no log) is committed when its ``_SUCCESS`` marker is
there; :func:`committed_files` then returns its data files.

This module imports no Spark.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

__all__ = ["METADATA_DIR", "committed_files"]

METADATA_DIR = "_spark_metadata"
"""The streaming file sink's commit log, inside the output folder."""

_LOG_FILE = re.compile(r"^(?P<batch>\d+)(?P<compact>\.compact)?$")


def committed_files(output_dir: str | os.PathLike[str]) -> list[Path]:
    """The data files of a local Spark Parquet output that a committed batch or job wrote,
    sorted: what Spark's reader reads, without crash leftovers.

    ``output_dir`` is a folder (or a ``file:`` URI), e.g. ``out/spark/sessions`` of the streaming
    job. With a ``_spark_metadata`` log (streaming): the files its latest compaction and the
    batch entries after it list, minus deletions. Without one (batch): the folder's data files,
    if its ``_SUCCESS`` marker says the write completed.

    Raises :class:`FileNotFoundError` when the folder does not exist and :class:`ValueError` when
    it is not a complete Spark output (no log, no ``_SUCCESS``) or its log is unreadable.
    """
    root = _local_path(os.fspath(output_dir))
    if not root.is_dir():
        raise FileNotFoundError(f"no Spark output at {root}")
    log = root / METADATA_DIR
    if not log.is_dir():
        if not (root / "_SUCCESS").exists():
            raise ValueError(
                f"{root} has neither a {METADATA_DIR} log nor a _SUCCESS marker: not a complete "
                "Spark output (a batch write that did not finish, or not Spark's)"
            )
        return sorted(p for p in root.iterdir() if p.is_file() and not _hidden(p.name))
    entries: list[tuple[int, bool, Path]] = []
    for item in log.iterdir():
        match = _LOG_FILE.match(item.name)  # skips .<n>.crc and in-flight .<uuid>.tmp files
        if match is not None:
            entries.append((int(match["batch"]), match["compact"] is not None, item))
    compactions = [batch for batch, compact, _ in entries if compact]
    since = max(compactions, default=-1)
    files: dict[str, Path] = {}
    for batch, compact, item in sorted(entries):
        if (compact and batch == since) or (not compact and batch > since):
            for action, path in _read_log_file(item):
                if action == "delete":
                    files.pop(path, None)
                else:
                    files[path] = _local_path(path)
    return sorted(files.values())


def _read_log_file(path: Path) -> list[tuple[str, str]]:
    """(action, path) of each entry of one ``_spark_metadata`` file: a ``v1`` line, then one
    JSON ``SinkFileStatus`` per line."""
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines or lines[0].strip() != "v1":
        found = lines[0][:20] if lines else "an empty file"
        raise ValueError(f"{path}: not a version 1 {METADATA_DIR} file (starts with {found!r})")
    entries = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            status = json.loads(line)
            entries.append((str(status.get("action", "add")), str(status["path"])))
        except (ValueError, KeyError, AttributeError) as exc:
            raise ValueError(f"{path}, line {number}: not a file entry ({exc})") from None
    return entries


def _local_path(location: str) -> Path:
    """A local path from a plain path or a ``file:`` URI (as Hadoop writes them into the log)."""
    parts = urlsplit(location)
    if parts.scheme == "file":
        return Path(unquote(parts.path))
    if parts.scheme and len(parts.scheme) > 1:  # "C:" is a Windows drive, not a scheme
        raise ValueError(
            f"{location}: committed_files reads local outputs; for {parts.scheme}:// read it "
            "with Spark, or list the files of its _spark_metadata log with that filesystem"
        )
    return Path(location)


def _hidden(name: str) -> bool:
    """Hadoop's rule: names starting with ``_`` or ``.`` are not data (``_SUCCESS``, ``.crc``)."""
    return name.startswith(("_", "."))
