"""Standbys on disk resume from their checkpoints across a restart of the whole instance: two
runtime processes with the SQLite engine and one standby per store partition; the one holding
the most standbys is stopped cleanly and started again on the same state dir."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from harness.table_cluster import (
    PARTITIONS,
    ROWS,
    STORE,
    ClusterError,
    Instance,
    TableCluster,
    http_get,
)
from streams_runtime.murmur2 import partition_for_key
from tests.helpers import unique_name

FILL = 6000  # rows besides ROWS: ~2000 changelog records per store partition
TAIL = 25  # updates per partition while the instance is down
TIMEOUT_S = 180.0
STREAK = 3  # polls in a row with the same roles


def _partition(key: str) -> int:
    return partition_for_key(key.encode(), PARTITIONS)


def _roles(cluster: TableCluster, probes: dict[int, str]) -> dict[int, tuple[str, str]] | None:
    """Per partition, the endpoints of its active and its standby."""
    roles = {}
    for partition, key in probes.items():
        status, meta = http_get(cluster.instances[0].url(f"/metadata/{STORE}/{key}"))
        if status != 200 or not meta["active_host"] or len(meta["standby_hosts"]) != 1:
            return None
        roles[partition] = (meta["active_host"], meta["standby_hosts"][0])
    return roles


def _standby_ends(
    cluster: TableCluster, roles: dict[int, tuple[str, str]], at_least: dict[int, int]
) -> dict[int, int] | None:
    """Per partition, the changelog end its standby caught up to (``None``: one is behind, or
    its changelog holds fewer than ``at_least`` records)."""
    ends = {}
    for partition, (active, standby) in roles.items():
        if active == standby:
            return None
        status, body = http_get(cluster.by_endpoint(standby).url("/lags"))
        lag = body.get("lags", {}).get(STORE, {}).get(str(partition))
        if status != 200 or not lag or lag["offset_lag"] != 0:
            return None
        if lag["end_offset"] < at_least[partition]:
            return None
        ends[partition] = lag["end_offset"]
    return ends


def _settle(
    cluster: TableCluster, probes: dict[int, str], at_least: dict[int, int]
) -> tuple[dict[int, tuple[str, str]], dict[int, int]]:
    """Roles that stay the same for :data:`STREAK` polls, with every standby caught up."""
    cluster.wait(lambda: all(i.healthy() for i in cluster.instances), TIMEOUT_S, "query servers")
    streak: list[dict[int, tuple[str, str]]] = []

    def settled() -> tuple[dict[int, tuple[str, str]], dict[int, int]] | None:
        try:
            roles = _roles(cluster, probes)
            ends = None if roles is None else _standby_ends(cluster, roles, at_least)
        except (OSError, ValueError, KeyError, StopIteration):
            roles = ends = None
        if roles is None or ends is None or (streak and streak[-1] != roles):
            streak.clear()
            return None
        streak.append(roles)
        return (roles, ends) if len(streak) >= STREAK else None

    return cluster.wait(settled, TIMEOUT_S, "stable roles with caught-up standbys")


def _resumed_offsets(log: str, partition: int) -> list[int]:
    pattern = rf"standby {STORE}/{partition} resumed from its checkpoint at (\d+)"
    return [int(offset) for offset in re.findall(pattern, log)]


@pytest.mark.broker
@pytest.mark.parametrize("engine", ["sqlite", "rocksdb"])
def test_a_restarted_instance_resumes_its_standbys_from_their_checkpoints(
    engine: str, kafka_bootstrap: str, create_topic: Callable[..., str], tmp_path: Path
) -> None:
    rows = {**ROWS, **{f"fill-{i}": f"fill-value-{i}" for i in range(FILL)}}
    counts = {p: sum(_partition(k) == p for k in rows) for p in range(PARTITIONS)}
    probes = {_partition(k): k for k in reversed(list(rows))}
    tail = {
        p: [k for k in rows if k.startswith("fill-") and _partition(k) == p][:TAIL]
        for p in range(PARTITIONS)
    }
    tail_values = {k: f"tail-{k}" for keys in tail.values() for k in keys}
    source = create_topic("standby-restart", partitions=PARTITIONS)
    cluster = TableCluster(
        kafka_bootstrap,
        source,
        unique_name("standby-restart"),
        tmp_path,
        count=2,
        rows=rows,
        settings={"PROGRESS_CONTROL_RUNTIME_STATE_ENGINE": engine},
    )

    def write_tail() -> None:
        producer = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random"})
        for key, value in tail_values.items():
            producer.produce(source, key=key.encode(), value=value.encode())
        if producer.flush(30):
            raise ClusterError("tail still queued after flush")

    try:
        roles, before = _settle(cluster, probes, counts)
        # Stop the instance with the most standbys: once it is back with one active of the
        # three partitions, at least one of them is its standby again.
        endpoints = [i.endpoint for i in cluster.instances]
        stopped = max(endpoints, key=lambda e: sum(s == e for _, s in roles.values()))
        held = {p for p, (_, standby) in roles.items() if standby == stopped}
        old = cluster.by_endpoint(stopped)
        log_start = len(old.log_text())
        again = cluster.restart(old, write_tail)
        after_counts = {p: before[p] + TAIL for p in range(PARTITIONS)}
        roles_after, after = _settle(cluster, probes, after_counts)
        log = again.log_text()[log_start:]
        logs = {i.endpoint: i.log_tail(20) for i in cluster.instances}
        # Back, it holds each of those partitions again: as a standby, or as the active it
        # became with that copy (it warmed up the tasks it would own before joining, and the
        # range assignor may give it the partitions it had standbys of).
        resumed = {p for p in held if again.endpoint in roles_after[p]}
        assert resumed, (roles, roles_after, logs)
        other: Instance = next(i for i in cluster.instances if i is not again)
        for p in sorted(resumed):
            # The standby resumed from the checkpoint written on the clean stop, where it was
            # caught up, and read only the records written since: the changelog's tail.
            offsets = _resumed_offsets(log, p)
            assert offsets, (p, logs)
            assert offsets[0] == before[p] >= counts[p], (p, offsets, before)
            read = again.metric(
                "streams_standby_restored_records_total", store=STORE, partition=str(p)
            )
            assert read == after[p] - before[p] == TAIL, (p, read, before, after)
            # Reads from that copy (a standby's stale reads, or the active it became) match the
            # values written.
            standby, owner = (
                (again, other) if roles_after[p][1] == again.endpoint else (other, again)
            )
            for key in [probes[p], *tail[p][:5]]:
                path = f"/stores/{STORE}/keys/{key}?local=true"
                status, stale = http_get(standby.url(f"{path}&allow_stale=true&max_lag=0"))
                assert status == 200, stale
                status, active = http_get(owner.url(path))
                assert status == 200, active
                assert stale["served_by"] == "standby"
                assert active["served_by"] == "active"
                assert stale["value"] == active["value"] == tail_values.get(key, rows[key])
    finally:
        cluster.stop()
