"""Standby-aware interactive queries across a SIGKILL (KIP-535): three runtime processes, one
standby per store partition; the key's active is killed while a client queries the key in a
loop through the third instance."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from harness.table_cluster import KEY, MAX_LAG, PARTITIONS, ROWS, TableCluster
from tests.helpers import unique_name

PLACEMENT_TIMEOUT_S = 180.0


@pytest.mark.broker
def test_queries_keep_answering_from_the_standby_when_the_active_is_killed(
    kafka_bootstrap: str, create_topic: Callable[..., str], tmp_path: Path
) -> None:
    source = create_topic("iq-failover", partitions=PARTITIONS)
    cluster = TableCluster(kafka_bootstrap, source, unique_name("iq-failover"), tmp_path)
    try:
        meta = cluster.stable_placement(PLACEMENT_TIMEOUT_S)
        run = cluster.failover(meta)
        logs = {i.endpoint: i.log_tail(20) for i in cluster.instances}
    finally:
        cluster.stop()
    context = f"failures: {run.failures[:5]}; logs: {logs}"
    assert run.timed_out is None, context
    assert all(
        status == 200
        and body["served_by"] == "active"
        and body["instance_id"] == run.killed.instance_id
        for status, body in run.before
    ), run.before
    # >= 99% of the queries sent after the kill answered, every answer right.
    assert len(run.answered) >= 0.99 * len(run.after), context
    assert all(body["value"] == ROWS[KEY] and body["found"] for _, body in run.answered)
    # While no live active had the key, the caught-up standby answered: stale, within max_lag.
    assert run.stale, context
    for _, body in run.stale:
        assert body["stale"] is True
        assert body["served_by"] in {"standby", "restoring"}
        assert 0 <= body["offset_lag"] <= MAX_LAG
        assert body["time_lag_ms"] >= 0
    assert {body["instance_id"] for _, body in run.stale} <= {
        run.standby.instance_id,
        run.client.instance_id,
    }
    # After the rebalance: the new active answers, and keeps answering.
    promoted = run.promoted
    assert promoted is not None, context
    assert run.from_new_active[-1][0] > run.stale[0][0]
    last = [body for _, _, _, body in run.after[-20:]]
    assert all(
        b["served_by"] == "active" and b["instance_id"] == promoted.instance_id for b in last
    )
    # Where the partition went to the standby's instance, its task started from the standby's
    # copy instead of the whole changelog.
    if promoted is run.standby:
        assert promoted.restored_from_standby(meta["partition"]), logs
