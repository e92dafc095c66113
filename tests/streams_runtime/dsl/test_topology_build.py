"""The topology DSL without a broker: sub-topologies, repartitioning, serdes, wiring errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams_runtime import SessionWindows, StreamsBuilder, TopologyError, Windowed
from streams_runtime.serdes import (
    Bytes,
    Float,
    Integer,
    Json,
    SerializationError,
    SessionWindowedSerde,
    String,
)
from streams_runtime.settings import RuntimeSettings


def test_select_key_then_group_repartitions_into_a_second_subtopology() -> None:
    builder = StreamsBuilder()
    (
        builder.stream("clicks")
        .select_key(lambda _k, v: v["user"])
        .group_by_key()
        .windowed_by(SessionWindows(gap_ms=1000))
        .count()
        .to_stream()
        .to("out")
    )
    topology = builder.build("app")
    assert len(topology.subtopologies) == 2
    [repartition] = topology.repartition_topics
    assert repartition.startswith("app-")
    assert repartition.endswith("-repartition")
    first, second = topology.subtopologies
    assert first.source_topics == ("clicks",)
    assert first.sink_topics == (repartition,)
    assert second.source_topics == (repartition,)
    assert second.sink_topics == ("out",)
    assert [s.kind for s in second.stores] == ["session"]
    assert "Sub-topology 1" in topology.describe()


def test_group_by_key_without_key_change_stays_in_one_subtopology() -> None:
    builder = StreamsBuilder()
    builder.stream("clicks").map_values(len).group_by_key().windowed_by(
        SessionWindows(gap_ms=10)
    ).count()
    topology = builder.build("app")
    assert len(topology.subtopologies) == 1
    assert not topology.repartition_topics


def test_join_and_merge_make_multi_input_tasks() -> None:
    builder = StreamsBuilder()
    table = builder.table("users")
    orders = builder.stream("orders").join(table, lambda o, u: (o, u))
    orders.merge(builder.stream("returns")).to("out")
    [sub] = builder.build("app").subtopologies
    assert set(sub.source_topics) == {"orders", "users", "returns"}


def test_a_topic_is_read_once() -> None:
    builder = StreamsBuilder()
    builder.stream("a")
    with pytest.raises(TopologyError, match="already a source"):
        builder.stream(["b", "a"])


def test_processors_are_fresh_per_task() -> None:
    builder = StreamsBuilder()
    builder.stream("a").filter(lambda k, v: True).to("b")
    [sub] = builder.build("app").subtopologies
    sources_1, processors_1 = sub.instantiate()
    sources_2, processors_2 = sub.instantiate()
    assert sources_1["a"] is not sources_2["a"]
    assert not set(map(id, processors_1)) & set(map(id, processors_2))


@pytest.mark.parametrize(
    ("serde", "value"),
    [
        (Bytes(), b"\x00\x01"),
        (String(), "héllo"),
        (Integer(), -(2**63)),
        (Float(), 1.5),
        (Json(), {"a": [1, 2, None]}),
        (SessionWindowedSerde(String()), Windowed("k", 10, 20)),
    ],
)
def test_serdes_round_trip(serde: object, value: object) -> None:
    data = serde.serialize(value)  # type: ignore[attr-defined]
    assert serde.deserialize(data) == value  # type: ignore[attr-defined]
    assert serde.serialize(None) is None  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("serde", "data"),
    [
        (String(), b"\xff"),
        (Integer(), b"123"),
        (Json(), b"{"),
        (SessionWindowedSerde(Json()), b"1"),
    ],
)
def test_serdes_reject_garbage(serde: object, data: bytes) -> None:
    with pytest.raises(SerializationError):
        serde.deserialize(data)  # type: ignore[attr-defined]


def test_settings_defaults_and_errors() -> None:
    settings = RuntimeSettings(application_id="a", bootstrap_servers="b:1")
    assert settings.commit_interval_ms == 30_000
    assert settings.dead_letter_topic == "a-dlq"
    eos = RuntimeSettings(
        application_id="a", bootstrap_servers="b:1", processing_guarantee="exactly_once_v2"
    )
    assert eos.exactly_once
    assert eos.commit_interval_ms == 100
    with pytest.raises(ValueError, match="max_task_idle_ms"):
        RuntimeSettings(application_id="a", bootstrap_servers="b:1", max_task_idle_ms=-2)
    pc = RuntimeSettings(
        application_id="a",
        bootstrap_servers="b:1",
        kafka={"client.id": "x"},
        consumer={"fetch.wait.max.ms": "5"},
    )
    assert pc.consumer_config()["fetch.wait.max.ms"] == "5"
    assert pc.producer_config()["client.id"] == "x"
    # One source of ticks on the runtime's outputs: its own.
    with pytest.raises(ValueError, match=r"progress\.control\.start\.ms: the runtime ticks"):
        RuntimeSettings(
            application_id="a", bootstrap_servers="b:1", kafka={"progress.control.start.ms": "5"}
        )


def test_control_record_trust_settings(tmp_path: Path) -> None:
    settings = RuntimeSettings(application_id="a", bootstrap_servers="b:1")
    assert settings.trust_policy().max_skew_ms == 300_000
    assert not settings.trust_policy().verification_keys
    keys = tmp_path / "keys"
    keys.write_text("k2:fedcba9876543210\n")
    signed = RuntimeSettings(
        application_id="a",
        bootstrap_servers="b:1",
        max_control_skew_ms=1000,
        control_verification_keys="k1:0123456789abcdef",
        control_verification_keys_file=keys,
        control_allowed_sources="app,sidecar",
    )
    policy = signed.trust_policy()
    assert policy.verification_keys == {"k1": b"0123456789abcdef", "k2": b"fedcba9876543210"}
    assert policy.allowed_sources == {"app", "sidecar"}
    assert "0123456789abcdef" not in repr(signed)
    with pytest.raises(ValueError, match="at least 16 bytes"):
        RuntimeSettings(
            application_id="a", bootstrap_servers="b:1", control_verification_keys="k:short"
        )
