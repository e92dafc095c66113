"""The state directory and the application's directory in it are the application's alone:
``rwxr-x---``, as Kafka Streams' ``StateDirectory`` makes them, whether they existed or not."""

from __future__ import annotations

import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from streams_runtime import App, StreamsBuilder
from streams_runtime.app_state import AppState
from streams_runtime.state.directory import STATE_DIRECTORY_MODE, application_directory
from tests.helpers import unique_name, wait_for


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_both_directories_are_made_private_created_or_found(tmp_path: Path) -> None:
    fresh = application_directory(tmp_path / "new" / "state", "app")
    assert _mode(fresh) == _mode(fresh.parent) == STATE_DIRECTORY_MODE == 0o750
    found = tmp_path / "old"
    (found / "app").mkdir(parents=True, mode=0o755)
    found.chmod(0o777)
    assert application_directory(found, "app") == found / "app"
    assert _mode(found) == _mode(found / "app") == 0o750


@pytest.mark.broker
def test_a_running_app_keeps_its_state_to_itself(
    run_app: Callable[..., App], create_topic: Callable[..., str], tmp_path: Path
) -> None:
    builder = StreamsBuilder()
    builder.stream(create_topic("state-dir-in")).to(create_topic("state-dir-out"))
    app_id = unique_name("state-dir")
    app = run_app(builder, application_id=app_id, state_dir=tmp_path / "state")
    wait_for(lambda: app.state is AppState.RUNNING, message="running")
    assert _mode(tmp_path / "state") == _mode(tmp_path / "state" / app_id) == 0o750
