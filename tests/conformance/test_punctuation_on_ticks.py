"""Why stream-time punctuators here fire on ticks, shown beside Kafka Streams itself: the
conformance case ``punctuated-count`` (a user processor with a store and a stream-time
punctuator every second) runs in Kafka Streams on the data alone and in a runtime process of
its own on the same data with a tick after it. When the input goes quiet, Kafka Streams'
stream time stops at the last record, so its punctuator stops too; the runtime's fires on the
tick alone (the delay after the tick is printed: docs/runtime/processor-api.md)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from progress_control.protocol import ControlMarker, ControlRecord
from tests.conformance.broker_runs import ProcessedCheck
from tests.conformance.kstreams import KafkaStreamsApps
from tests.helpers import TopicReader, unique_name, wait_for
from tests.paths import ROOT

pytestmark = [pytest.mark.broker, pytest.mark.network]

INTERVAL_MS = 1_000
DATA = [("a", 100), ("b", 1_500), ("a", 2_400)]  # (key, ms after the base)
TICK_MS = 6_000


def _punctuations(reader: TopicReader) -> list[tuple[str, int]]:
    return [
        ((m.value() or b"").decode(), m.timestamp()[1])
        for m in reader.read(quiet_s=0.2, max_s=0.5)
        if (m.value() or b"").startswith(b"p=")
    ]


def test_a_quiet_input_punctuates_on_ticks_here_and_not_in_kafka_streams(
    kafka_bootstrap: str,
    kafka_streams: KafkaStreamsApps,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    tmp_path: Path,
) -> None:
    data, ticked = create_topic("punct-data"), create_topic("punct-ticked")
    ks_out, runtime_out = create_topic("punct-ks-out"), create_topic("punct-rt-out")
    base = (int(time.time() * 1000) // 60_000 - 10) * 60_000  # minutes back, on a minute
    ks_id, runtime_id = unique_name("punct-kstreams"), unique_name("punct-runtime")
    kafka_streams.start(
        {
            "application.id": ks_id,
            "bootstrap.servers": kafka_bootstrap,
            "state.dir": str(tmp_path / "kstreams"),
            "topologies": "p",
            "p.type": "punctuated-count",
            "p.in": data,
            "p.out": ks_out,
            "p.gap.ms": str(INTERVAL_MS),
            "config.commit.interval.ms": "100",
        }
    )
    env = {
        **os.environ,
        "PROGRESS_CONTROL_RUNTIME_APPLICATION_ID": runtime_id,
        "PROGRESS_CONTROL_RUNTIME_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "PROGRESS_CONTROL_RUNTIME_STATE_DIR": str(tmp_path / "runtime"),
        "PROGRESS_CONTROL_RUNTIME_COMMIT_INTERVAL_MS": "100",
    }
    command = [sys.executable, "-m", "tests.conformance.runtime_process", "punctuated-count"]
    runtime = subprocess.Popen([*command, ticked, runtime_out, str(INTERVAL_MS)], env=env, cwd=ROOT)
    try:
        producer = Producer({"bootstrap.servers": kafka_bootstrap})
        for key, at in DATA:  # the same records to both inputs, then nothing
            for topic in (data, ticked):
                producer.produce(topic, key=key, value=b"v", timestamp=base + at)
        assert producer.flush(30) == 0
        ks, rt = reader_for(ks_out, 1), reader_for(runtime_out, 1)
        ks_seen: list[tuple[str, int]] = []
        rt_seen: list[tuple[str, int]] = []
        last = base + DATA[-1][1]

        def both_punctuated_to(t: int) -> bool:
            ks_seen.extend(_punctuations(ks))
            rt_seen.extend(_punctuations(rt))
            assert runtime.poll() is None, "the runtime process died"
            return any(ts == t for _, ts in ks_seen) and any(ts == t for _, ts in rt_seen)

        wait_for(lambda: both_punctuated_to(last), timeout_s=120, message="both punctuate")
        # The input is quiet. Kafka Streams' stream time stays at the last record: once it has
        # committed the end of its input, nothing more can fire. The runtime gets a tick, as
        # the producer's interceptor would send one, and fires on it alone.
        kstreams_done = ProcessedCheck(kafka_bootstrap, ks_id, [data])
        try:
            wait_for(kstreams_done, timeout_s=60, message="Kafka Streams to commit its input")
        finally:
            kstreams_done.close()
        tick = ControlRecord(ticked, 0, base + TICK_MS, ControlMarker("test-producer", 0))
        producer.produce(**tick.produce_kwargs())  # type: ignore[arg-type]
        assert producer.flush(30) == 0
        ticked_at = time.monotonic()

        def fired_on_tick() -> list[str]:
            rt_seen.extend(_punctuations(rt))
            return [value for value, ts in rt_seen if ts == base + TICK_MS]

        on_tick = wait_for(fired_on_tick, timeout_s=30, message="a punctuation on the tick")
        print(f"the runtime punctuated {time.monotonic() - ticked_at:.2f} s after the tick")
        assert sorted(on_tick) == [f"p=1@{base + TICK_MS}", f"p=2@{base + TICK_MS}"]
        ks_seen.extend(_punctuations(ks))
        assert max(ts for _, ts in ks_seen) == last
    finally:
        runtime.terminate()
        runtime.wait(30)
        kafka_streams.stop(ks_id)
