"""The global stores' state manager (Kafka Streams' ``GlobalStateManagerImpl``): where each
partition of a global topic resumes after a restart (its checkpoint, or the beginning with the
store wiped when the checkpoint is missing, corrupt or does not fit the topic), and the
registry tasks and queries find the stores in. No broker: watermarks are given."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams_runtime.record import TopicPartitionId
from streams_runtime.state import StateDirectoryLockedError
from streams_runtime.state.global_store import GlobalStateManager, GlobalStores

P0, P1, P2 = (TopicPartitionId("customers", p) for p in range(3))
PERSISTENT = ("sqlite", "rocksdb")


def _manager(state_dir: Path, engine: str = "sqlite") -> GlobalStateManager:
    return GlobalStateManager(
        application_id="app",
        stores={"customers": "customers"},
        engine=engine,  # type: ignore[arg-type]
        state_dir=state_dir,
    )


def _filled(state_dir: Path, engine: str) -> None:
    """A store that read offsets 0..9 of P0 and 0..4 of P1, committed and checkpointed."""
    with_manager = _manager(state_dir, engine)
    assert with_manager.resume({P0: (0, 10), P1: (0, 5)}) == {P0: 0, P1: 0}
    with_manager.stores["customers"].put(b"ann", b"\x00" * 8 + b"1", 1)
    with_manager.applied(P0, 10)
    with_manager.applied(P1, 5)
    with_manager.commit()
    with_manager.close()


@pytest.mark.parametrize("engine", PERSISTENT)
def test_a_restart_resumes_from_the_checkpoint_with_the_stores_data(
    tmp_path: Path, engine: str
) -> None:
    _filled(tmp_path, engine)
    manager = _manager(tmp_path, engine)
    # P2 was added since: read from its start.
    assert manager.resume({P0: (0, 12), P1: (0, 5), P2: (0, 3)}) == {P0: 10, P1: 5, P2: 0}
    assert manager.stores["customers"].get(b"ann") == b"\x00" * 8 + b"1"
    manager.close()


@pytest.mark.parametrize(
    ("watermarks", "why"),
    [
        ({P0: (0, 8), P1: (0, 5)}, "beyond the end"),  # the topic was recreated
        ({P0: (11, 12), P1: (0, 5)}, "before the start"),  # records deleted unread
    ],
)
def test_a_checkpoint_that_does_not_fit_the_topic_rebuilds_the_store(
    tmp_path: Path,
    watermarks: dict[TopicPartitionId, tuple[int, int]],
    why: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    _filled(tmp_path, "sqlite")
    manager = _manager(tmp_path)
    with caplog.at_level("INFO"):
        starts = manager.resume(watermarks)
    assert starts == {tp: low for tp, (low, _high) in watermarks.items()}
    assert why in caplog.text
    assert manager.stores["customers"].get(b"ann") is None  # wiped
    # The checkpoint went before the wipe: a crash now rebuilds again, never trusts it.
    manager.close()
    assert _manager(tmp_path).resume({P0: (0, 12), P1: (0, 5)}) == {P0: 0, P1: 0}


def test_a_missing_or_corrupt_checkpoint_rebuilds_from_the_beginning(tmp_path: Path) -> None:
    _filled(tmp_path, "sqlite")
    checkpoint = tmp_path / "app" / "global" / ".checkpoint"
    checkpoint.write_text("{not json")
    manager = _manager(tmp_path)
    assert manager.resume({P0: (0, 10), P1: (0, 5)}) == {P0: 0, P1: 0}
    assert manager.stores["customers"].count() == 0
    manager.close()


def test_in_memory_every_start_reads_the_whole_topic(tmp_path: Path) -> None:
    manager = _manager(tmp_path, "memory")
    assert manager.resume({P0: (3, 10)}) == {P0: 3}
    manager.applied(P0, 10)
    manager.commit()  # nothing on disk
    assert not (tmp_path / "app" / "global").exists()
    manager.close()


def test_the_global_directory_has_one_owner(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    with pytest.raises(StateDirectoryLockedError):
        _manager(tmp_path)
    manager.close()
    _manager(tmp_path).close()


def test_the_registry_finds_open_stores_by_name(tmp_path: Path) -> None:
    manager = _manager(tmp_path, "memory")
    stores = GlobalStores()
    assert stores.get("customers") is None
    stores.register(manager.stores["customers"])
    assert "customers" in stores
    assert stores.store("customers") is manager.stores["customers"]
    stores.clear()
    with pytest.raises(KeyError, match="not open"):
        stores.store("customers")
