"""A real single-node Apache Kafka broker (KRaft, combined mode) run from Maven Central jars.

This is the project's embedded default for the demo and the tests: no Docker, just Java 17+ and
Maven (once, to fill the jar cache). ``progress-control broker`` runs it in the foreground.

    with EmbeddedKafkaBroker() as broker:
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers})
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import fcntl
import logging
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any

from confluent_kafka.admin import AdminClient
from pydantic import Field
from pydantic_settings import BaseSettings

from progress_control.settings import KafkaProperties, component_config, load_settings
from progress_control_apps.dev.jars import (
    KAFKA_VERSION,
    MissingToolError,
    classpath,
    fetch_jars,
    find_java,
    kafka_broker_jars,
)
from progress_control_apps.dev.jvm import die_with_parent, java_version, stop_process_group
from progress_control_apps.dev.ports import accepts_connections, free_port

__all__ = ["BrokerSettings", "BrokerStartError", "EmbeddedKafkaBroker"]

logger = logging.getLogger(__name__)

_MIN_JAVA = 17
_START_ATTEMPTS = 3
_STOP_TIMEOUT_S = 20.0


class BrokerSettings(BaseSettings):
    """Embedded broker settings; env prefix ``PROGRESS_CONTROL_BROKER_``."""

    model_config = component_config("PROGRESS_CONTROL_BROKER_")

    kafka_version: str = Field(KAFKA_VERSION, description="Apache Kafka release to run.")
    host: str = Field("127.0.0.1", description="Loopback address the listeners bind to.")
    port: int = Field(0, ge=0, le=65535, description="Client port; 0 or busy picks a free one.")
    controller_port: int = Field(0, ge=0, le=65535, description="KRaft controller port; as port.")
    data_dir: Path | None = Field(
        None, description="Persistent log dir; unset means a temporary dir removed on stop."
    )
    cache_dir: Path | None = Field(None, description="Jar cache; unset means the default one.")
    heap: str = Field("1g", pattern=r"^\d+[kmgKMG]?$", description="JVM -Xmx value.")
    jvm_options: str = Field(
        "",
        description="More JVM options, space-separated (tests: C1 only, for short-lived brokers).",
    )
    startup_timeout_s: float = Field(120.0, gt=0, description="Readiness deadline.")
    server_properties: KafkaProperties = Field(
        default_factory=dict, description="Extra or overriding server.properties entries."
    )


class BrokerStartError(RuntimeError):
    """The broker did not become ready; the message includes its log tail."""


class EmbeddedKafkaBroker:
    """Start, wait for, and stop one local Kafka broker process."""

    def __init__(self, settings: BrokerSettings | None = None) -> None:
        self.settings = settings or load_settings(BrokerSettings)
        self._process: subprocess.Popen[bytes] | None = None
        self._workdir: Path | None = None
        self._owns_workdir = False
        self._port = 0
        self._controller_port = 0

    # -- public API ---------------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        if self._process is None:
            raise RuntimeError("broker is not running")
        return f"{self.settings.host}:{self._port}"

    @property
    def log_path(self) -> Path:
        if self._workdir is None:
            raise RuntimeError("broker was never started")
        return self._workdir / "logs" / "server.log"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> EmbeddedKafkaBroker:
        """Fetch jars if needed, format storage, start the JVM and wait until it serves metadata.

        On a ``data_dir`` that holds a previous run's data the broker restarts on it, with its
        cluster id, topics and records (and its previous ports when they are free). A data dir
        that belongs to another broker (another node id or cluster) or that a running broker
        uses is refused with a :class:`BrokerStartError` naming the problem.
        """
        if self._process is not None:
            return self
        java = find_java()
        _check_java_version(java)
        jars = fetch_jars(kafka_broker_jars(self.settings.kafka_version), self.settings.cache_dir)
        self._prepare_workdir()
        previous_port, previous_controller_port = self._previous_ports()
        last_error: BrokerStartError | None = None
        for _ in range(_START_ATTEMPTS):
            self._port = free_port(
                self.settings.host,
                self.settings.port or previous_port,
                quiet=not self.settings.port,
            )
            self._controller_port = free_port(
                self.settings.host,
                self.settings.controller_port or previous_controller_port,
                avoid={self._port},
                quiet=not self.settings.controller_port,
            )
            # Only the first attempt prefers the previous run's ports: a retry means one was taken.
            previous_port = previous_controller_port = 0
            try:
                self._launch(java, classpath(jars))
                self._wait_ready()
            except BrokerStartError as exc:
                self._terminate()
                last_error = exc
                if "Address already in use" not in str(exc):
                    break
                logger.warning("broker port was taken while starting; retrying on other ports")
            else:
                atexit.register(self.stop)
                return self
        self._cleanup_workdir()
        assert last_error is not None
        raise last_error

    def stop(self) -> None:
        """Stop the broker (SIGTERM, then SIGKILL after a grace period) and remove temp data."""
        atexit.unregister(self.stop)
        self._terminate()
        self._cleanup_workdir()

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` of the broker's log and console output."""
        if self._workdir is None:
            return ""
        chunks = []
        for path in (self._workdir / "logs" / "server.log", self._workdir / "logs" / "stdout.log"):
            with contextlib.suppress(OSError):
                text = path.read_text(errors="replace").splitlines()[-lines:]
                if text:
                    chunks.append(f"--- {path.name} ---\n" + "\n".join(text))
        return "\n".join(chunks)

    def __enter__(self) -> EmbeddedKafkaBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- internals ----------------------------------------------------------------------------

    def _prepare_workdir(self) -> None:
        if self.settings.data_dir is not None:
            self._workdir = self.settings.data_dir.resolve()
            self._owns_workdir = False
        else:
            self._workdir = Path(tempfile.mkdtemp(prefix="progress-control-broker-"))
            self._owns_workdir = True
        for sub in ("config", "logs", "data"):
            (self._workdir / sub).mkdir(parents=True, exist_ok=True)

    def _previous_ports(self) -> tuple[int, int]:
        """Client and controller ports of the last run on this data dir (0 when unknown), so a
        restart keeps the address clients were given."""
        assert self._workdir is not None
        try:
            listeners = _read_properties(self._workdir / "config" / "server.properties").get(
                "listeners", ""
            )
        except OSError:
            return 0, 0
        ports = dict(re.findall(r"(PLAINTEXT|CONTROLLER)://[^,]*:(\d+)", listeners))
        return int(ports.get("PLAINTEXT", 0)), int(ports.get("CONTROLLER", 0))

    def _launch(self, java: Path, jar_classpath: str) -> None:
        assert self._workdir is not None
        config = self._workdir / "config"
        server_properties = config / "server.properties"
        properties = self._server_properties()
        log_dirs = _log_dirs(properties)
        _check_not_in_use(log_dirs)
        cluster_id, formatted = _existing_storage(log_dirs, properties["node.id"])
        server_properties.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
        log4j = config / "log4j2.properties"
        log4j.write_text(_LOG4J2_TEMPLATE.format(log=self._workdir / "logs" / "server.log"))
        jvm = [
            str(java),
            "-Xms128m",
            f"-Xmx{self.settings.heap}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            *self.settings.jvm_options.split(),
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            jar_classpath,
        ]
        if not formatted:
            # A fresh data dir gets a new cluster id; a partly formatted one (a log dir added
            # to log.dirs) is completed with the id its other dirs already carry.
            self._format_storage(jvm, server_properties, cluster_id or _random_cluster_id())
        with (self._workdir / "logs" / "stdout.log").open("ab") as console:
            self._process = subprocess.Popen(
                [*jvm, "kafka.Kafka", str(server_properties)],
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                cwd=self._workdir,
                start_new_session=True,  # Ctrl-C in a terminal reaches us, and we stop it cleanly
                preexec_fn=die_with_parent,  # noqa: PLW1509 - only async-signal-safe prctl
            )

    def _format_storage(self, jvm: list[str], server_properties: Path, cluster_id: str) -> None:
        result = subprocess.run(
            [
                *jvm,
                "kafka.tools.StorageTool",
                "format",
                "--ignore-formatted",
                "--cluster-id",
                cluster_id,
                "--config",
                str(server_properties),
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        if result.returncode != 0:
            output = result.stdout + result.stderr
            logger.debug(
                "kafka.tools.StorageTool format output:\n%(output)s",
                {"output": output, "exit_code": result.returncode},
            )
            raise BrokerStartError(
                f"formatting broker storage in {self._workdir} failed "
                f"(exit {result.returncode}): {_java_error(output)}"
            )

    def _server_properties(self) -> dict[str, str]:
        assert self._workdir is not None
        host, port, cport = self.settings.host, self._port, self._controller_port
        properties = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{host}:{cport}",
            "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{cport}",
            "advertised.listeners": f"PLAINTEXT://{host}:{port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self._workdir / "data"),
            "num.partitions": "1",
            # A single node: every internal topic has one replica.
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            # Fewer internal partitions and no join delay: groups form in milliseconds, not seconds.
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.num.partitions": "4",
            "group.initial.rebalance.delay.ms": "0",
            # KIP-848 groups take their session timeout and heartbeat interval from the broker
            # (or a group's own config within these bounds): allow the short ones tests and the
            # demo use, as the classic protocol's 6 s minimum did.
            "group.consumer.min.session.timeout.ms": "1000",
            "group.consumer.min.heartbeat.interval.ms": "100",
            # Members learn of a new assignment on their next heartbeat: every step of a
            # rebalance waits up to this long (the broker's default: 5 s).
            "group.consumer.heartbeat.interval.ms": "500",
            # A killed producer's open transaction is aborted within a second of its timeout,
            # not ten (exactly-once failovers wait for it).
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
            "auto.create.topics.enable": "true",
            **self.settings.server_properties,
        }
        return properties

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.settings.startup_timeout_s
        quiet = logging.getLogger(f"{__name__}.readiness")
        quiet.setLevel(logging.CRITICAL)
        admin: AdminClient | None = None
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise BrokerStartError(
                    f"Kafka broker exited with code {self._process.returncode} while starting.\n"
                    f"{self.log_tail()}"
                )
            if admin is None and accepts_connections(self.settings.host, self._port):
                # librdkafka logs every refused connection; readiness polling expects those.
                conf: dict[str, Any] = {
                    "bootstrap.servers": self.bootstrap_servers,
                    "logger": quiet,
                }
                admin = AdminClient(conf)
            if admin is not None:
                with contextlib.suppress(Exception):
                    if admin.list_topics(timeout=2).brokers:
                        return
            time.sleep(0.1)
        raise BrokerStartError(
            f"Kafka broker on {self.settings.host}:{self._port} was not ready within "
            f"{self.settings.startup_timeout_s:.0f}s.\n{self.log_tail()}"
        )

    def _terminate(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            stop_process_group(process, _STOP_TIMEOUT_S, "broker")

    def _cleanup_workdir(self) -> None:
        if self._owns_workdir and self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)


_LOG4J2_TEMPLATE = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
"""


def _check_java_version(java: Path) -> None:
    major, reported = java_version(java)
    if major < _MIN_JAVA:
        raise MissingToolError(
            f"Java {_MIN_JAVA}+ is required to run the Kafka broker, but {java} reports "
            f"{reported!r}"
        )


def _read_properties(path: Path) -> dict[str, str]:
    """A Java properties file as Kafka writes them (``key=value`` lines, ``#`` comments)."""
    properties = {}
    for raw in path.read_text(errors="replace").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, _, value = line.partition("=")
        properties[key.strip()] = value.strip()
    return properties


def _log_dirs(properties: dict[str, str]) -> list[Path]:
    """Every directory the broker keeps data in: ``log.dirs`` and ``metadata.log.dir``."""
    dirs = [d for d in properties.get("log.dirs", properties.get("log.dir", "")).split(",") if d]
    if properties.get("metadata.log.dir"):
        dirs.append(properties["metadata.log.dir"])
    return list(dict.fromkeys(Path(d.strip()) for d in dirs))


def _existing_storage(log_dirs: list[Path], node_id: str) -> tuple[str | None, bool]:
    """The cluster id the log dirs were formatted with (None when none was), and whether every
    one of them is formatted. Raises :class:`BrokerStartError` when they belong to another
    broker: Kafka would refuse them too, but with a stack trace instead of a reason."""
    found: dict[Path, dict[str, str]] = {}
    for directory in log_dirs:
        path = directory / "meta.properties"
        if path.is_file():
            found[directory] = _read_properties(path)
    for directory, meta in found.items():
        if meta.get("version") != "1" or not meta.get("cluster.id"):
            raise BrokerStartError(
                f"{directory} is not a KRaft log dir this broker can use (its meta.properties "
                f"has version={meta.get('version')}, cluster.id={meta.get('cluster.id')}): "
                "choose another data dir"
            )
        if meta.get("node.id") != node_id:
            raise BrokerStartError(
                f"{directory} belongs to another broker: its meta.properties says "
                f"node.id={meta.get('node.id')}, this broker is node.id={node_id}. Use another "
                "data dir, or run with that node id "
                "(PROGRESS_CONTROL_BROKER_SERVER_PROPERTIES__NODE_ID)"
            )
    cluster_ids = sorted({meta["cluster.id"] for meta in found.values()})
    if len(cluster_ids) > 1:
        raise BrokerStartError(
            f"the log dirs {', '.join(map(str, found))} belong to different Kafka clusters "
            f"({', '.join(cluster_ids)}): give this broker the dirs of one cluster"
        )
    return (cluster_ids[0] if cluster_ids else None), len(found) == len(log_dirs)


def _check_not_in_use(log_dirs: list[Path]) -> None:
    """Refuse log dirs a running broker holds: Kafka locks ``<dir>/.lock`` (a POSIX record
    lock, as ``fcntl.lockf`` takes) while it runs."""
    for directory in log_dirs:
        lock = directory / ".lock"
        if not lock.is_file():
            continue
        with lock.open("a") as handle:
            try:
                fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                raise BrokerStartError(
                    f"{directory} is in use by another running Kafka broker: stop it first, "
                    "or use another data dir"
                ) from None
            fcntl.lockf(handle, fcntl.LOCK_UN)


def _java_error(output: str) -> str:
    """The message of the exception a Kafka tool died with, without its stack trace."""
    for line in output.splitlines():
        match = re.match(r"(?:Exception in thread \"\S+\" )?[\w.$]+(?:Exception|Error): (.+)", line)
        if match:
            return match.group(1).strip()
    return output.strip()


def _random_cluster_id() -> str:
    # Kafka's Uuid string form: URL-safe base64 of 16 random bytes without padding; the CLI
    # rejects ids that start with "-".
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text
