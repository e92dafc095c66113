"""A librdkafka error reaches our logs once: through ``error_cb``, not also through the client's
``logger`` (a dead broker port produces connection errors every backoff), and a repeated one at
most once per 30 s, saying how many it stands for."""

from __future__ import annotations

import logging
import re
import socket
import time
from collections import Counter

import pytest
from confluent_kafka.cimpl import Producer as KafkaProducer

from progress_control.logging import RateLimitedKeys
from progress_control.ticks.sender import tick_producer_config
from progress_control.ticks.settings import TickSettings


def dead_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def error_counts(records: list[logging.LogRecord], prefix: str) -> tuple[Counter[str], int]:
    """Per error text that ``error_cb`` logged (``prefix<text>``): how many times; and how many
    log lines in all repeat one of those texts."""
    reported = Counter(
        r.getMessage()[len(prefix) :] for r in records if r.getMessage().startswith(prefix)
    )
    mentions = sum(1 for r in records for text in reported if text in r.getMessage())
    return reported, mentions


def test_tick_producer_logs_each_error_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    config = tick_producer_config(
        {"bootstrap.servers": f"127.0.0.1:{dead_port()}"}, TickSettings.from_config({})
    )
    producer = KafkaProducer(config)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        producer.poll(0.1)
    reported, mentions = error_counts(caplog.records, "progress-control producer: ")
    assert any("Connection refused" in text for text in reported), caplog.text
    assert mentions == sum(reported.values()), caplog.text
    # Some ten failed connections in 3 s; each kind logged once (the numbers in it aside).
    kinds = Counter(re.sub(r"\d+", "#", text) for text in reported.elements())
    assert set(kinds.values()) == {1}, caplog.text


def test_rate_limited_keys_let_one_through_per_interval_and_count_the_rest() -> None:
    now = [0.0]
    keys = RateLimitedKeys(30.0, limit=2, clock=lambda: now[0])
    assert keys.admit("refused") == 0
    assert [keys.admit("refused") for _ in range(3)] == [None, None, None]
    assert keys.admit("timeout") == 0
    assert keys.admit("third") is None  # past the limit: held back
    now[0] = 30.0
    assert keys.admit("refused") == 3  # the three held back since
    assert keys.admit("refused") is None
