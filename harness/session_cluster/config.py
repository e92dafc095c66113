"""What every instance of a session cluster shares: :class:`ClusterConfig` (the runtime settings
each process gets as env variables), and the names the harness's modules share: the guarantee
and group-protocol choices, a topic-partition key, :class:`ClusterError`."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

SESSION_TIMEOUT_MS = 6_000
ALOS_COMMIT_INTERVAL_MS = 500
"""At-least-once commits every 30 s by default. A failover replays what was not committed, and
the replayed span must stay below gap + grace (see
:attr:`~harness.session_cluster.plan.Plan.victim_s`): 500 ms."""
ROOT = Path(__file__).resolve().parents[2]

Guarantee = Literal["exactly_once", "at_least_once"]
TopologyName = Literal["dsl", "processor"]
"""The DSL's session count, or the same sessions through a user processor."""
TOPOLOGY_ENV = "HARNESS_SESSION_TOPOLOGY"
"""Which topology an instance runs."""
GroupProtocol = Literal["auto", "consumer", "classic"]
TopicPartitionKey = tuple[str, int]


class ClusterError(RuntimeError):
    """The cluster did not get where it was waited for; the message says why."""


@dataclass(frozen=True)
class ClusterConfig:
    """What every instance of one :class:`SessionCluster` shares."""

    bootstrap: str
    application_id: str
    source: str
    sink: str
    guarantee: Guarantee = "exactly_once"
    progress_propagation: bool = True
    group_protocol: GroupProtocol = "auto"
    """The runtime's ``group_protocol`` (it applies the session timeout and heartbeat interval
    below to a KIP-848 group's config)."""
    topology: TopologyName = "dsl"

    def env(self) -> dict[str, str]:
        prefix = "PROGRESS_CONTROL_RUNTIME_"
        settings = {
            "APPLICATION_ID": self.application_id,
            "BOOTSTRAP_SERVERS": self.bootstrap,
            "PROCESSING_GUARANTEE": self.guarantee,
            "NUM_STANDBY_REPLICAS": "1",
            "PROGRESS_PROPAGATION": "true" if self.progress_propagation else "false",
            "METRICS_PORT": "0",
            # The checkers read every repartition record at the end: purge none meanwhile.
            "REPARTITION_PURGE_INTERVAL_MS": "3600000",
            "CONSUMER__SESSION_TIMEOUT_MS": str(SESSION_TIMEOUT_MS),
            "CONSUMER__HEARTBEAT_INTERVAL_MS": "500",
            "GROUP_PROTOCOL": self.group_protocol,
        }
        if self.guarantee == "at_least_once":
            settings["COMMIT_INTERVAL_MS"] = str(ALOS_COMMIT_INTERVAL_MS)
        return {
            **os.environ,
            TOPOLOGY_ENV: self.topology,
            "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
            **{prefix + name: value for name, value in settings.items()},
        }
