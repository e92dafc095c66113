"""Input topics must exist before an application starts: the error says which and what to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams_runtime import App, StreamsBuilder
from streams_runtime.processing import internal_topics
from streams_runtime.serdes import String
from tests.helpers import unique_name


@pytest.mark.broker
def test_a_missing_input_topic_stops_the_app_with_what_to_do(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(internal_topics, "_INPUT_WAIT_S", 1.0)
    clicks, users = unique_name("clicks"), unique_name("users")
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
    builder.stream(clicks).join(builder.table(users), lambda c, u: c + u).to(unique_name("out"))
    app = App(
        builder,
        application_id=unique_name("app"),
        bootstrap_servers=kafka_bootstrap,
        state_dir=tmp_path,
    )
    app.start()
    try:
        assert app.wait_until("ERROR", 60)
    finally:
        app.close()
    message = str(app.error)
    assert f"input topics {clicks!r}, {users!r} not found on {kafka_bootstrap}" in message
    assert "Create input topics before starting the application" in message
    assert f"NewTopic({clicks!r}, num_partitions=3)" in message
