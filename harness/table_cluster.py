"""Runtime processes serving one table (three by default), for the failover and standby-restart
tests and the query-failover benchmark (``bench/query_failover.py``).

Each process (this module run with ``--instance SOURCE [OUTPUT]``) is an app with a String table
of ``SOURCE`` in the store ``store`` (and, given ``OUTPUT``, the table's updates written to that
topic); every setting comes from PROGRESS_CONTROL_RUNTIME_* env variables, set by
:class:`TableCluster`: one standby replica per store partition, commit interval 100 ms, consumer
session timeout :data:`SESSION_TIMEOUT_MS`, a query token, its own state dir, query endpoint,
metrics port and log file (plus the settings a caller adds, such as the state engine).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka import Producer

from harness.waiting import wait_for

T = TypeVar("T")

PARTITIONS = 3
ROWS = {f"key-{i}": f"value-{i}" for i in range(30)}
KEY = "key-7"
STORE = "store"
TOKEN = "cluster-token"  # noqa: S105 - a local test cluster's query token
MAX_LAG = 2  # below a changelog partition's length: a fresh, empty standby is not within it
STABLE_POLLS = 5  # 0.5 s apart
NEW_ACTIVE_STREAK = 20
SESSION_TIMEOUT_MS = 6000
ROOT = Path(__file__).resolve().parents[1]

Answer = tuple[int, dict[str, Any]]


class ClusterError(RuntimeError):
    """The cluster did not get where it was waited for; the message says why."""


def _instance_main(source: str, output: str | None) -> None:
    import faulthandler

    from progress_control.logging import configure_logging
    from streams_runtime import App, StreamsBuilder
    from streams_runtime.serdes import String

    configure_logging("INFO", json=False)
    faulthandler.register(signal.SIGUSR1)  # stack dump on demand, for debugging hangs
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
    table = builder.table(source, store_name=STORE)
    if output is not None:
        table.to_stream().to(output)
    App(builder).run()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_get(url: str, timeout: float = 5.0) -> Answer:
    """GET with the cluster's token: status and JSON body; transport errors raise."""
    request = urllib.request.Request(url)  # noqa: S310 - a local query server
    request.add_header("Authorization", f"Bearer {TOKEN}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            return exc.code, json.loads(raw)
        except ValueError:
            return exc.code, {"raw": raw[:200].decode(errors="replace")}


def query(url: str) -> Answer:
    """:func:`http_get` with transport errors as status 599."""
    try:
        return http_get(url)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return 599, {"error": type(exc).__name__, "message": str(exc)}


class Instance:
    """One runtime process with its own query endpoint, metrics port, state dir and log file
    (appended to, so a restarted instance keeps one log)."""

    def __init__(
        self, env: dict[str, str], source: str, log: Path, output: str | None = None
    ) -> None:
        self.env, self.source, self.output = env, source, output
        self.port = _free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.metrics_port = _free_port()
        self.log_path = log
        self._log = log.open("ab")
        command = [sys.executable, "-m", "harness.table_cluster", "--instance", source]
        self.process = subprocess.Popen(
            command if output is None else [*command, output],
            env={
                **env,
                "PROGRESS_CONTROL_RUNTIME_APPLICATION_SERVER": self.endpoint,
                "PROGRESS_CONTROL_RUNTIME_METRICS_PORT": str(self.metrics_port),
            },
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )
        self.instance_id = ""
        self.killed = False

    def url(self, path: str) -> str:
        return f"http://{self.endpoint}{path}"

    def healthy(self) -> bool:
        try:
            status, body = http_get(self.url("/health"))
        except (OSError, http.client.HTTPException, ValueError):
            return False
        self.instance_id = body.get("instance_id", "")
        return status == 200

    def metric(self, name: str, **labels: str) -> float | None:
        """The value of the sample ``name`` with exactly ``labels`` on ``/metrics`` (``None``:
        no such sample)."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
        wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        for line in text.splitlines():
            match = re.fullmatch(r"([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)", line)
            if match is None or match[1] != name:
                continue
            found = ",".join(sorted((match[2] or "").split(","))) if match[2] else ""
            if found == wanted:
                return float(match[3])
        return None

    def check_alive(self) -> None:
        code = self.process.poll()
        if code is not None and not self.killed:
            raise ClusterError(f"instance {self.endpoint} exited with {code}: {self.log_tail()}")

    def log_tail(self, lines: int = 5) -> list[str]:
        text = self.log_text().splitlines()
        return [line[-300:] for line in text[-lines:]]

    def log_text(self) -> str:
        # The process writes the file itself; this side never buffers any of it.
        return self.log_path.read_text(errors="replace")

    def restored_from_standby(self, partition: int) -> bool | None:
        """Whether this instance's last restore of the table's task for ``partition`` started
        from its standby's copy (``None``: no such restore in the log)."""
        lines = [
            line for line in self.log_text().splitlines() if f"task 0_{partition} restored:" in line
        ]
        return None if not lines else f"keys from standbys of ['{STORE}']" in lines[-1]

    def kill(self) -> None:
        self.killed = True
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self._log.close()


@dataclass
class Failover:
    """What a client querying the key saw around the SIGKILL of the key's active."""

    killed: Instance
    standby: Instance
    client: Instance
    # (seconds after the kill the query was sent, seconds it took, status, body)
    after: list[tuple[float, float, int, dict[str, Any]]] = field(default_factory=list)
    before: list[Answer] = field(default_factory=list)
    timed_out: str | None = None
    killed_at: float = 0.0  # time.monotonic() when SIGKILL was sent

    @property
    def answered(self) -> list[tuple[float, dict[str, Any]]]:
        return [(sent + took, body) for sent, took, status, body in self.after if status == 200]

    @property
    def failures(self) -> list[Answer]:
        return [(status, body) for _, _, status, body in self.after if status != 200]

    @property
    def stale(self) -> list[tuple[float, dict[str, Any]]]:
        return [(t, b) for t, b in self.answered if b.get("served_by") != "active"]

    @property
    def from_new_active(self) -> list[tuple[float, dict[str, Any]]]:
        return [
            (t, b)
            for t, b in self.answered
            if b.get("served_by") == "active" and b.get("instance_id") != self.killed.instance_id
        ]

    @property
    def promoted(self) -> Instance | None:
        """The instance the key's partition went to, as the last answers say."""
        new = self.from_new_active
        if not new:
            return None
        promoted_id = new[-1][1].get("instance_id")
        return next((i for i in (self.standby, self.client) if i.instance_id == promoted_id), None)


class TableCluster:
    """``count`` instances of one application on a fresh 3-partition topic of ``rows``
    (:data:`ROWS` by default; ``settings``: more PROGRESS_CONTROL_RUNTIME_* env variables;
    ``output``: the topic the table's updates go to)."""

    def __init__(
        self,
        bootstrap: str,
        source: str,
        application_id: str,
        workdir: Path,
        *,
        count: int = 3,
        rows: Mapping[str, str] = ROWS,
        settings: Mapping[str, str] | None = None,
        output: str | None = None,
    ) -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
        for n, (key, value) in enumerate(rows.items()):
            producer.produce(source, key=key.encode(), value=value.encode())
            if n % 10_000 == 0:
                producer.poll(0)
        if producer.flush(30):
            raise ClusterError("rows still queued after flush")
        env = {
            **os.environ,
            "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
            "PROGRESS_CONTROL_RUNTIME_APPLICATION_ID": application_id,
            "PROGRESS_CONTROL_RUNTIME_BOOTSTRAP_SERVERS": bootstrap,
            "PROGRESS_CONTROL_RUNTIME_COMMIT_INTERVAL_MS": "100",
            "PROGRESS_CONTROL_RUNTIME_NUM_STANDBY_REPLICAS": "1",
            "PROGRESS_CONTROL_RUNTIME_QUERY_TOKEN": TOKEN,
            "PROGRESS_CONTROL_RUNTIME_CONSUMER__SESSION_TIMEOUT_MS": str(SESSION_TIMEOUT_MS),
            "PROGRESS_CONTROL_RUNTIME_CONSUMER__HEARTBEAT_INTERVAL_MS": "500",
            **(settings or {}),
        }
        self.instances: list[Instance] = []
        try:
            for i in range(count):
                state = {"PROGRESS_CONTROL_RUNTIME_STATE_DIR": str(workdir / f"state-{i}")}
                self.instances.append(
                    Instance({**env, **state}, source, workdir / f"{i}.log", output)
                )
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for inst in self.instances:
            if inst.process.poll() is None:
                inst.process.terminate()
        for inst in self.instances:
            inst.stop()

    def restart(
        self, instance: Instance, while_stopped: Callable[[], object] | None = None
    ) -> Instance:
        """Stop ``instance`` cleanly (SIGTERM), call ``while_stopped``, and start it again with
        the same settings, state dir and log file (new query endpoint and metrics port); the
        new one takes its place."""
        instance.stop()
        if while_stopped is not None:
            while_stopped()
        again = Instance(instance.env, instance.source, instance.log_path, instance.output)
        self.instances[self.instances.index(instance)] = again
        return again

    def by_endpoint(self, endpoint: str) -> Instance:
        return next(i for i in self.instances if i.endpoint == endpoint)

    def wait(
        self,
        condition: Callable[[], T | None],
        timeout_s: float,
        what: str,
        *,
        interval_s: float = 0.5,
    ) -> T:
        """Poll ``condition`` until it returns a truthy value; :class:`ClusterError` after
        ``timeout_s`` or when an instance that was not killed exits."""

        def checked() -> T | None:
            for inst in self.instances:
                inst.check_alive()
            return condition()

        try:
            return wait_for(checked, timeout_s=timeout_s, interval_s=interval_s, message=what)
        except AssertionError as exc:
            raise ClusterError(str(exc)) from None

    def placement(self) -> dict[str, Any] | None:
        """The key's metadata once every instance agrees on an active and a standby of every
        partition, the key's standby is caught up and the key's active answers."""
        try:
            for inst in self.instances:
                for key in ("key-0", "key-1", "key-2", KEY):
                    status, meta = http_get(inst.url(f"/metadata/{STORE}/{key}"))
                    if status != 200 or not meta["active_host"] or not meta["standby_hosts"]:
                        return None
            status, meta = http_get(self.instances[0].url(f"/metadata/{STORE}/{KEY}"))
            active = self.by_endpoint(meta["active_host"])
            standby = self.by_endpoint(meta["standby_hosts"][0])
            if status != 200 or standby is active:
                return None
            status, lags = http_get(standby.url("/lags"))
            lag = lags.get("lags", {}).get(STORE, {}).get(str(meta["partition"]))
            if status != 200 or not lag or lag["offset_lag"] != 0 or lag["end_offset"] == 0:
                return None
            status, body = http_get(self.instances[0].url(f"/stores/{STORE}/keys/{KEY}"))
        except (OSError, http.client.HTTPException, ValueError, KeyError, StopIteration):
            return None
        answered = (
            status == 200
            and body.get("value") == ROWS[KEY]
            and body.get("served_by") == "active"
            and body.get("instance_id") == active.instance_id
        )
        return meta if answered else None

    def stable_placement(self, timeout_s: float) -> dict[str, Any]:
        """:meth:`placement`, with the same active and standby of the key in
        :data:`STABLE_POLLS` polls in a row (tasks keep moving for a while after joining)."""
        self.wait(lambda: all(i.healthy() for i in self.instances), timeout_s, "query servers")
        streak: list[tuple[str, str]] = []

        def stable() -> dict[str, Any] | None:
            meta = self.placement()
            if meta is None:
                streak.clear()
                return None
            roles = (meta["active_host"], meta["standby_hosts"][0])
            if streak and streak[-1] != roles:
                streak.clear()
            streak.append(roles)
            return meta if len(streak) >= STABLE_POLLS else None

        return self.wait(stable, timeout_s, "stable actives and caught-up standbys")

    def roles(self, meta: dict[str, Any]) -> tuple[Instance, Instance, Instance]:
        """The key's active, its standby, and the third instance."""
        active = self.by_endpoint(meta["active_host"])
        standby = self.by_endpoint(meta["standby_hosts"][0])
        client = next(i for i in self.instances if i not in (active, standby))
        return active, standby, client

    def failover(
        self, meta: dict[str, Any], *, interval_s: float = 0.02, timeout_s: float = 180.0
    ) -> Failover:
        """Query the key through the third instance in a loop (``allow_stale=true`` and
        ``max_lag=MAX_LAG``, ``interval_s`` between queries), SIGKILL the key's active after a
        second, and stop after :data:`NEW_ACTIVE_STREAK` answers in a row from a new active
        (or ``timeout_s`` after the kill)."""
        active, standby, client = self.roles(meta)
        result = Failover(active, standby, client)
        answers: list[tuple[float, float, int, dict[str, Any]]] = []
        stop = threading.Event()
        url = client.url(f"/stores/{STORE}/keys/{KEY}?allow_stale=true&max_lag={MAX_LAG}")

        def query_loop() -> None:
            while not stop.is_set():
                sent = time.monotonic()
                status, body = query(url)
                answers.append((sent, time.monotonic(), status, body))
                time.sleep(interval_s)

        querier = threading.Thread(target=query_loop, name="failover-querier", daemon=True)
        querier.start()
        time.sleep(1.0)
        killed_at = result.killed_at = time.monotonic()
        active.kill()

        def new_active_streak() -> bool:
            recent = [a for a in answers[-NEW_ACTIVE_STREAK:] if a[0] > killed_at]
            return len(recent) == NEW_ACTIVE_STREAK and all(
                status == 200
                and body.get("served_by") == "active"
                and body.get("instance_id") != active.instance_id
                for _, _, status, body in recent
            )

        try:
            what = f"{NEW_ACTIVE_STREAK} answers in a row from a new active"
            self.wait(new_active_streak, timeout_s, what, interval_s=0.2)
        except ClusterError as exc:
            result.timed_out = str(exc)
        finally:
            stop.set()
            querier.join(10)
        result.before = [(status, body) for _, at, status, body in answers if at < killed_at]
        result.after = [
            (sent - killed_at, at - sent, status, body)
            for sent, at, status, body in answers
            if sent > killed_at
        ]
        return result


if __name__ == "__main__":
    if sys.argv[1:2] != ["--instance"] or len(sys.argv) not in (3, 4):
        sys.exit("usage: python -m harness.table_cluster --instance SOURCE_TOPIC [OUTPUT]")
    _instance_main(sys.argv[2], sys.argv[3] if len(sys.argv) == 4 else None)
