"""Companion drivers of ``run`` blocks that call ``App.run()`` (``driver: NAME``): what the page
says happens, done and checked while the app runs, so the block's text stays what a user runs
(tests.docs.python_blocks bounds ``run()``)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Message, Producer
from confluent_kafka.admin import AdminClient

from progress_control.protocol import ControlMarker, ControlRecord, is_control_record
from progress_control.trust import ControlRecordValidator, TrustPolicy, Verdict
from streams_runtime import App
from tests.helpers import TopicReader, wait_for

__all__ = ["DRIVERS", "Driver", "RunEnv"]


@dataclass
class RunEnv:
    """Where a block runs: the suite's broker and the test's temporary directory."""

    bootstrap: str
    admin: AdminClient
    tmp_path: Path


class Driver:
    """Hooks around a block: ``before`` it runs, ``while_running`` inside its ``App.run()``
    (the app is RUNNING; the app is closed after), ``after`` it returned."""

    def before(self, env: RunEnv) -> None:
        """Before the block runs (its ``topics:`` exist and are empty)."""

    def while_running(self, app: App, env: RunEnv) -> None:
        """While the block's app runs."""

    def after(self, env: RunEnv) -> None:
        """After the block returned."""


class Sessions(Driver):
    """The first topology of docs/runtime/dsl.md: clicks keyed by page, sessions
    per user on ``sessions``. Alice clicks twice 10 s apart, a bot once; then only a control
    record comes, 36 s after her last click (gap 30 s + grace 5 s passed): her one final
    session comes out, and nothing for the bot."""

    def while_running(self, app: App, env: RunEnv) -> None:
        base = (int(time.time()) - 600) * 1000  # ten minutes ago: ticks may not be ahead
        producer = Producer({"bootstrap.servers": env.bootstrap})
        clicks = [
            ("home", {"user": "alice"}, base),
            ("home", {"user": "robot", "bot": True}, base + 5_000),
            ("pricing", {"user": "alice"}, base + 10_000),
        ]
        for page, click, timestamp in clicks:
            producer.produce("page-clicks", key=page, value=json.dumps(click), timestamp=timestamp)
        tick = ControlRecord("page-clicks", 0, base + 46_000, ControlMarker("docs-driver", 0))
        producer.produce(**tick.produce_kwargs())  # type: ignore[arg-type]
        producer.flush(30)
        reader = TopicReader(env.bootstrap, "user-sessions", 1)
        try:
            records = wait_for(
                lambda: [m for m in reader.read() if not is_control_record(m)],
                timeout_s=60,
                message="a session on the user-sessions topic",
            )
            reader.read(quiet_s=1.0, max_s=2.0)  # nothing else comes (the bot's is dropped)
            sessions = [
                (m.key(), json.loads(m.value() or b"null"))
                for m in reader.records
                if not is_control_record(m)
            ]
        finally:
            reader.close()
        assert len(records) >= 1
        assert sessions == [
            (b"alice", {"start": base, "end": base + 10_000, "clicks": 2}),
        ], sessions


class UserSessions(Driver):
    """The topology of README.md (and docs/getting-started.md): clicks keyed by user, sessions of
    10 s gap and 2 s grace on ``sessions``, the clicks again on ``events``. Alice clicks twice
    4 s apart, a bot once; then only a control record comes, 13 s after her last click: her
    one final session comes out, and both human clicks on ``events``."""

    def while_running(self, app: App, env: RunEnv) -> None:
        base = (int(time.time()) - 600) * 1000
        producer = Producer({"bootstrap.servers": env.bootstrap})
        for user, click, timestamp in [
            ("alice", {"user": "alice", "page": "/", "ts": base}, base),
            (
                "bot-7",
                {"user": "bot-7", "page": "/", "ts": base + 1_000, "bot": True},
                base + 1_000,
            ),
            ("alice", {"user": "alice", "page": "/cart", "ts": base + 4_000}, base + 4_000),
        ]:
            producer.produce("clicks", key=user, value=json.dumps(click), timestamp=timestamp)
        tick = ControlRecord("clicks", 0, base + 17_000, ControlMarker("docs-driver", 0))
        producer.produce(**tick.produce_kwargs())  # type: ignore[arg-type]
        producer.flush(30)
        sessions = _data(env, "sessions", bool)
        assert sessions == [
            (b"alice", {"user": "alice", "start": base, "end": base + 4_000, "count": 2})
        ], sessions
        events = _data(env, "events", lambda found: len(found) >= 2)
        assert [(k, v["page"]) for k, v in events] == [(b"alice", "/"), (b"alice", "/cart")]


def _data(
    env: RunEnv, topic: str, enough: Callable[[list[Message]], bool]
) -> list[tuple[bytes | None, Any]]:
    """The data records of ``topic`` (control records left out) once ``enough`` of them came,
    and a second later (nothing more comes)."""
    reader = TopicReader(env.bootstrap, topic, 1)
    try:

        def data() -> list[Message]:
            return [m for m in reader.read() if not is_control_record(m)]

        wait_for(lambda: enough(data()), timeout_s=60, message=f"records on {topic}")
        reader.read(quiet_s=1.0, max_s=2.0)
        return [(m.key(), json.loads(m.value() or b"null")) for m in data()]
    finally:
        reader.close()


class SignedTick(Driver):
    """docs/concepts/trust.md's tick signed by hand: one control record on events[0], which a
    reader given key k1 accepts and one given another key refuses."""

    def after(self, env: RunEnv) -> None:
        reader = TopicReader(env.bootstrap, "events", 1)
        try:
            ticks = wait_for(reader.ticks, timeout_s=30, message="the tick on events")
        finally:
            reader.close()
        assert len(ticks) == 1
        tick = ticks[0]
        headers = tick.headers()
        assert isinstance(headers, list)
        right = TrustPolicy(verification_keys={"k1": b"change-me-to-a-long-random-secret"})
        wrong = TrustPolicy(verification_keys={"k1": b"another-secret-of-16-bytes-or-more"})
        verdicts = [
            ControlRecordValidator(policy).check("events", 0, tick.timestamp()[1], headers)
            for policy in (right, wrong)
        ]
        assert verdicts[0] is Verdict.ACCEPTED
        assert verdicts[1] is not Verdict.ACCEPTED, verdicts


DRIVERS: dict[str, type[Driver]] = {
    "sessions": Sessions,
    "user-sessions": UserSessions,
    "signed-tick": SignedTick,
}
"""Name (``driver: NAME``) -> driver."""
