"""committed_files: the files of a Spark output that committed batches wrote, without crash
leftovers (a real streaming run's output with planted leftovers is in test_spark_jobs.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from progress_control_apps.spark.output import committed_files


def _entry(path: Path, action: str = "add") -> str:
    status = {
        "path": path.as_uri(),
        "size": 1,
        "isDir": False,
        "modificationTime": 0,
        "blockReplication": 1,
        "blockSize": 33554432,
        "action": action,
    }
    return json.dumps(status)


def _log(root: Path, name: str, *lines: str) -> None:
    log = root / "_spark_metadata"
    log.mkdir(exist_ok=True)
    (log / name).write_text("\n".join(["v1", *lines]))


def test_the_latest_compaction_and_the_batches_after_it(tmp_path: Path) -> None:
    out = tmp_path / "out put"  # a space: the log holds percent-encoded URIs
    out.mkdir()
    files = {n: out / f"part-{n}.parquet" for n in ("a", "b", "c", "d", "left", "empty")}
    for path in files.values():
        path.write_bytes(b"" if path.name == "part-empty.parquet" else b"PAR1")
    _log(out, "0", _entry(files["left"]))  # superseded by the compaction: not read
    _log(out, "1.compact", _entry(files["a"]), _entry(files["b"]))
    _log(out, "2", _entry(files["c"]), _entry(files["b"], "delete"))
    _log(out, "3", _entry(files["d"]))
    (out / "_spark_metadata" / ".3.crc").write_bytes(b"crc")
    (out / "_spark_metadata" / ".4.a1b2.tmp").write_text("v1\n" + _entry(files["empty"]))
    assert committed_files(out) == [files["a"], files["c"], files["d"]]
    assert committed_files(out.as_uri()) == [files["a"], files["c"], files["d"]]


def test_a_log_with_no_batch_yet(tmp_path: Path) -> None:
    (tmp_path / "_spark_metadata").mkdir()
    (tmp_path / "part-0.parquet").write_bytes(b"")
    assert committed_files(tmp_path) == []


def test_a_batch_output_is_committed_by_its_success_marker(tmp_path: Path) -> None:
    (tmp_path / "part-1.parquet").write_bytes(b"PAR1")
    (tmp_path / "part-0.parquet").write_bytes(b"PAR1")
    (tmp_path / ".part-0.parquet.crc").write_bytes(b"crc")
    with pytest.raises(ValueError, match="neither a _spark_metadata log nor a _SUCCESS marker"):
        committed_files(tmp_path)
    (tmp_path / "_SUCCESS").write_bytes(b"")
    assert committed_files(tmp_path) == [tmp_path / "part-0.parquet", tmp_path / "part-1.parquet"]


def test_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        committed_files(tmp_path / "missing")
    with pytest.raises(ValueError, match="reads local outputs"):
        committed_files("s3a://bucket/out")
    _log(tmp_path, "0")
    (tmp_path / "_spark_metadata" / "0").write_text("v9\n{}")
    with pytest.raises(ValueError, match="not a version 1 _spark_metadata file"):
        committed_files(tmp_path)
    _log(tmp_path, "0", '{"size": 1}')
    with pytest.raises(ValueError, match="line 2: not a file entry"):
        committed_files(tmp_path)
