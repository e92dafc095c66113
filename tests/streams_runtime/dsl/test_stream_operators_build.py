"""The topologies ``flat_map``, ``flat_map_values``, ``split``, ``to_table``, ``group_by`` and a
table's ``suppress(until_time_limit(...))`` build, without a broker: node and store names as
Kafka Streams gives them (generated with its prefixes and numbers, or the ``name`` given), and
where they repartition (``Topology.describe()``, ``repartition_topics``)."""

from __future__ import annotations

import pytest

from streams_runtime import Branched, BufferConfig, StreamsBuilder, TopologyError, until_time_limit


def _lines(topology_description: str) -> list[str]:
    return [line.strip() for line in topology_description.splitlines()]


def test_generated_names_follow_kafka_streams() -> None:
    builder = StreamsBuilder()
    branches = (
        builder.stream("in")
        .flat_map(lambda k, v: [(k, v)])
        .flat_map_values(lambda v: [v])
        .split()
        .branch(lambda _k, v: v == 1)
        .branch(lambda _k, v: v == 2)
        .default_branch()
    )
    # The split takes number 3, each branch a number of its own (4, 5, 6), as Kafka Streams'
    # BranchedKStreamImpl does; the branches are named after the split.
    assert list(branches) == [
        "KSTREAM-BRANCH-00000000031",
        "KSTREAM-BRANCH-00000000032",
        "KSTREAM-BRANCH-00000000030",
    ]
    branches["KSTREAM-BRANCH-00000000030"].to_table().suppress(
        until_time_limit(10, BufferConfig.unbounded())
    ).to_stream().to("out")
    lines = _lines(builder.build("app").describe())
    assert lines[1:5] == [
        "KSTREAM-SOURCE-0000000000 -> KSTREAM-FLATMAP-0000000001",
        "KSTREAM-FLATMAP-0000000001 -> KSTREAM-FLATMAPVALUES-0000000002",
        "KSTREAM-FLATMAPVALUES-0000000002 -> KSTREAM-BRANCH-0000000003",
        "KSTREAM-BRANCH-0000000003 -> KSTREAM-BRANCH-00000000031, KSTREAM-BRANCH-00000000032, "
        "KSTREAM-BRANCH-00000000030",
    ]
    # flat_map changed the key, and a branch keeps that: the table repartitions through a
    # topic named after it (7, its store 8; the repartition's sink and source 9 and 10).
    assert (
        "KSTREAM-TOTABLE-0000000007 stores [KSTREAM-TOTABLE-STATE-STORE-0000000008] "
        "-> KTABLE-SUPPRESS-0000000011"
    ) in lines
    assert (
        "KTABLE-SUPPRESS-0000000011 stores [KTABLE-SUPPRESS-STATE-STORE-0000000012] "
        "-> KSTREAM-SINK-0000000013"
    ) in lines
    assert list(builder.build("app").repartition_topics) == [
        "app-KSTREAM-TOTABLE-0000000007-repartition"
    ]


def test_given_names_take_no_number() -> None:
    builder = StreamsBuilder()
    branches = (
        builder.stream("in")
        .flat_map(lambda k, v: [(k, v)], name="explode")
        .split(name="route-")
        .branch(lambda _k, v: v > 0, Branched.with_name("positive"))
        .default_branch(Branched.with_name("other"))
    )
    assert list(branches) == ["route-positive", "route-other"]
    (
        branches["route-positive"]
        .group_by(lambda _k, v: v, name="by-value")
        .count(name="counts")
        .suppress(until_time_limit(10, BufferConfig.max_records(5)), name="calm")
        .to_stream()
        .to("out")
    )
    branches["route-other"].flat_map_values(lambda v: [v], name="again").to_table(
        name="others", store_name="others-store"
    )
    topology = builder.build("app")
    lines = _lines(topology.describe())
    # Generated numbers: the two branches (1, 2), then the repartitions, the count and sink.
    assert "explode -> route-" in lines
    assert "route- -> route-positive, route-other" in lines
    assert "route-positive -> by-value" in lines
    assert "KSTREAM-AGGREGATE-0000000005 stores [counts] -> calm" in lines
    assert "calm stores [calm-store] -> KSTREAM-SINK-0000000006" in lines
    # The branch keeps flat_map's key change, so the table repartitions, named after it.
    assert "KSTREAM-SOURCE-0000000008 -> others" in lines
    assert "others stores [others-store]" in lines
    assert list(topology.repartition_topics) == [
        "app-by-value-repartition",
        "app-others-repartition",
    ]
    assert len(topology.subtopologies) == 3


def test_to_table_and_group_by_without_key_change() -> None:
    builder = StreamsBuilder()
    stream = builder.stream("in").flat_map_values(lambda v: [v])
    stream.to_table()
    stream.group_by(lambda k, _v: k).count()  # group_by always repartitions
    topology = builder.build("app")
    assert len(topology.repartition_topics) == 1
    [repartition] = topology.repartition_topics
    assert repartition.startswith("app-KSTREAM-REPARTITION-")


def test_duplicate_names_and_misuse_are_refused() -> None:
    builder = StreamsBuilder()
    stream = builder.stream("in").flat_map(lambda k, v: [(k, v)], name="x")
    with pytest.raises(TopologyError, match="'x' is already"):
        stream.flat_map_values(lambda v: [v], name="x")
    split = stream.split(name="s")
    split.branch(lambda _k, _v: True, Branched.with_name("a"))
    with pytest.raises(TopologyError, match="'sa' is already"):
        split.branch(lambda _k, _v: True, Branched.with_name("a"))
    split.no_default_branch()
    with pytest.raises(TopologyError, match="already ended"):
        split.branch(lambda _k, _v: True)
    with pytest.raises(ValueError, match="function or a consumer"):
        Branched(function=lambda s: s, consumer=lambda s: None)
    with pytest.raises(ValueError, match="time_to_wait_ms"):
        until_time_limit(-1, BufferConfig.unbounded())
