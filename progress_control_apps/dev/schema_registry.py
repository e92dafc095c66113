"""A Confluent-compatible Schema Registry for the dev environment and the tests: Apicurio Registry
3 serving Confluent's REST API (its ccompat API, ``/apis/ccompat/v7``), with in-memory storage,
on a free loopback port.

It runs the distribution Apicurio's release publishes to Maven Central (the Quarkus fast-jar of
``io.apicurio:apicurio-registry-app``, classifier ``all``; ``poms/schema-registry.xml``), fetched
once into the cache with Maven as the broker's jars are. Apicurio 3 needs Java 21+, which the
broker does not: :func:`find_registry_java` looks for one. Schemas live in an H2 database in the
JVM's memory, gone when it stops. ``progress-control schema-registry`` runs it in the foreground.

    with EmbeddedSchemaRegistry() as registry:
        client = SchemaRegistryClient({"url": registry.url})
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from types import TracebackType

from pydantic import Field
from pydantic_settings import BaseSettings

from progress_control.settings import (
    KafkaProperties,
    component_config,
    default_cache_dir,
    load_settings,
)
from progress_control_apps.dev.cache import fill_once
from progress_control_apps.dev.jars import JarFetchError, MissingToolError, find_maven
from progress_control_apps.dev.jvm import die_with_parent, java_version, stop_process_group
from progress_control_apps.dev.ports import accepts_connections, free_port

__all__ = [
    "APICURIO_VERSION",
    "EmbeddedSchemaRegistry",
    "SchemaRegistrySettings",
    "SchemaRegistryStartError",
    "fetch_registry",
    "find_registry_java",
]

logger = logging.getLogger(__name__)

APICURIO_VERSION = "3.3.3"
"""Apicurio Registry release the embedded schema registry runs."""

MIN_JAVA = 21
"""Apicurio Registry 3 is built for Java 21 (Quarkus 3)."""

JVM_DIRS = (Path("/usr/lib/jvm"),)
"""Where JDKs are installed side by side (Debian's and Adoptium's packages), searched for a Java
21+ when neither the setting nor ``JAVA_HOME`` nor ``PATH`` gives one."""

CCOMPAT_PATH = "/apis/ccompat/v7"
"""Where Apicurio serves Confluent's Schema Registry API."""

_MANIFEST = "MANIFEST.json"
_LAUNCHER = "quarkus-run.jar"
_MAVEN_TIMEOUT_S = 900
_START_ATTEMPTS = 3
_STOP_TIMEOUT_S = 20.0
# Quarkus's words when its HTTP or management port is taken.
_PORT_TAKEN = re.compile(r"seems to be in use|Address already in use")


class SchemaRegistrySettings(BaseSettings):
    """Embedded schema registry settings; env prefix ``PROGRESS_CONTROL_SCHEMA_REGISTRY_``."""

    model_config = component_config("PROGRESS_CONTROL_SCHEMA_REGISTRY_")

    apicurio_version: str = Field(APICURIO_VERSION, description="Apicurio Registry release to run.")
    host: str = Field("127.0.0.1", description="Loopback address the HTTP ports bind to.")
    port: int = Field(0, ge=0, le=65535, description="API port; 0 or busy picks a free one.")
    management_port: int = Field(
        0, ge=0, le=65535, description="Health and metrics port (/health, /metrics); as port."
    )
    java_home: Path | None = Field(
        None, description="A Java 21+ to run it with; unset means JAVA_HOME, PATH or /usr/lib/jvm."
    )
    cache_dir: Path | None = Field(None, description="Jar cache; unset means the default one.")
    heap: str = Field("512m", pattern=r"^\d+[kmgKMG]?$", description="JVM -Xmx value.")
    startup_timeout_s: float = Field(180.0, gt=0, description="Readiness deadline.")
    properties: KafkaProperties = Field(
        default_factory=dict,
        description="Extra or overriding Apicurio and Quarkus configuration (system properties; "
        "the JVM reads APICURIO_* and QUARKUS_* variables itself too).",
    )


class SchemaRegistryStartError(RuntimeError):
    """The schema registry did not become ready; the message includes its log tail."""


def find_registry_java(java_home: Path | None = None, jvm_dirs: Sequence[Path] = JVM_DIRS) -> Path:
    """A ``java`` launcher of Java 21+: ``java_home``'s (the setting; it must be one), else
    ``$JAVA_HOME``'s, else ``java`` on ``PATH``, else the newest under ``jvm_dirs``. Raises
    :class:`MissingToolError` naming what was found when none is 21+."""
    if java_home is not None:
        java = java_home / "bin" / "java"
        major, reported = java_version(java) if java.is_file() else (0, "no bin/java there")
        if major < MIN_JAVA:
            raise MissingToolError(
                f"PROGRESS_CONTROL_SCHEMA_REGISTRY_JAVA_HOME={java_home} is no Java {MIN_JAVA}+ "
                f"({reported}); Apicurio Registry 3 needs one"
            )
        return java
    candidates: list[Path] = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(Path(os.environ["JAVA_HOME"]) / "bin" / "java")
    on_path = shutil.which("java")
    if on_path:
        candidates.append(Path(on_path))
    installed = sorted(
        {
            (d / "bin" / "java").resolve()
            for root in jvm_dirs
            if root.is_dir()
            for d in root.iterdir()
        }
    )
    found: list[str] = []
    newest: tuple[int, Path] | None = None
    seen: set[Path] = set()
    for position, java in enumerate([*candidates, *installed]):
        if not java.is_file() or java.resolve() in seen:
            continue
        seen.add(java.resolve())
        major, _ = java_version(java)
        found.append(f"{java} (Java {major or '?'})")
        if major < MIN_JAVA:
            continue
        if position < len(candidates):  # JAVA_HOME or PATH: what the user chose
            return java
        if newest is None or major > newest[0]:
            newest = (major, java)
    if newest is not None:
        return newest[1]
    raise MissingToolError(
        f"Apicurio Registry 3 needs Java {MIN_JAVA}+, and none was found "
        f"(JAVA_HOME, PATH, {', '.join(map(str, jvm_dirs))}): "
        f"{', '.join(found) or 'no Java at all'}. Install one (e.g. a Temurin 21 JRE, or "
        "`apt-get install openjdk-21-jre-headless` where the distribution has it) or set "
        "PROGRESS_CONTROL_SCHEMA_REGISTRY_JAVA_HOME to its home."
    )


def fetch_registry(
    version: str = APICURIO_VERSION, cache_dir: Path | None = None, *, quiet: bool = False
) -> Path:
    """The directory of Apicurio Registry ``version``'s distribution (``quarkus-run.jar`` and its
    libraries), unpacked into the cache from Maven Central the first time, once across processes.
    A later call checks the manifest of every file's size, and fetches again if one is off."""
    target = (cache_dir or default_cache_dir()) / "schema-registry" / f"apicurio-registry-{version}"

    def build(staging: Path) -> None:
        _unpack_distribution(version, staging)
        files = {
            str(path.relative_to(staging)): path.stat().st_size
            for path in sorted(staging.rglob("*"))
            if path.is_file()
        }
        (staging / _MANIFEST).write_text(json.dumps(files, indent=1, sort_keys=True))

    announce = (
        f"Fetching Apicurio Registry {version} from Maven Central into {target} (first run only)..."
    )
    return fill_once(target, _is_complete, build, None if quiet else announce)


def _unpack_distribution(version: str, staging: Path) -> None:
    template = resources.files("progress_control_apps.dev").joinpath("poms", "schema-registry.xml")
    with tempfile.TemporaryDirectory(prefix="progress-control-maven-") as project:
        pom = Path(project) / "pom.xml"  # Maven writes target/ beside it: not in the cache
        pom.write_text(template.read_text().replace("@VERSION@", version))
        command = [
            str(find_maven()),
            "--batch-mode",
            "--no-transfer-progress",
            "-f",
            str(pom),
            "dependency:unpack-dependencies",
            f"-DoutputDirectory={staging}",
        ]
        local_repo = os.environ.get("PROGRESS_CONTROL_MAVEN_REPO")
        if local_repo:
            command.append(f"-Dmaven.repo.local={local_repo}")
        try:
            result = subprocess.run(
                command, capture_output=True, text=True, timeout=_MAVEN_TIMEOUT_S, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise JarFetchError(
                f"Maven did not finish within {_MAVEN_TIMEOUT_S}s: {command}"
            ) from exc
    if result.returncode != 0 or not (staging / _LAUNCHER).is_file():
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-25:])
        raise JarFetchError(
            f"Maven could not fetch Apicurio Registry {version} (exit {result.returncode}):\n{tail}"
        )


def _is_complete(directory: Path) -> bool:
    try:
        expected = json.loads((directory / _MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(expected, dict) or _LAUNCHER not in expected:
        return False
    try:
        return all((directory / name).stat().st_size == size for name, size in expected.items())
    except OSError:
        return False


class EmbeddedSchemaRegistry:
    """Start, wait for, and stop one local Apicurio Registry process."""

    def __init__(self, settings: SchemaRegistrySettings | None = None) -> None:
        self.settings = settings or load_settings(SchemaRegistrySettings)
        self._process: subprocess.Popen[bytes] | None = None
        self._workdir: Path | None = None
        self._port = 0
        self._management_port = 0

    # -- public API ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The Confluent Schema Registry API's URL, e.g. ``http://127.0.0.1:41234/apis/ccompat/v7``
        (a ``SchemaRegistryClient``'s ``url``)."""
        return f"{self.base_url}{CCOMPAT_PATH}"

    @property
    def base_url(self) -> str:
        """The registry's root URL (Apicurio's own API is under ``/apis/registry/v3``)."""
        if self._process is None:
            raise RuntimeError("schema registry is not running")
        host = f"[{self.settings.host}]" if ":" in self.settings.host else self.settings.host
        return f"http://{host}:{self._port}"

    @property
    def management_port(self) -> int:
        """The port of ``/health`` and ``/metrics``."""
        if self._process is None:
            raise RuntimeError("schema registry is not running")
        return self._management_port

    @property
    def log_path(self) -> Path:
        if self._workdir is None:
            raise RuntimeError("schema registry was never started")
        return self._workdir / "registry.log"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> EmbeddedSchemaRegistry:
        """Find a Java 21+, fetch the distribution if needed, start the JVM and wait until the
        Confluent API answers."""
        if self._process is not None:
            return self
        java = find_registry_java(self.settings.java_home)
        distribution = fetch_registry(self.settings.apicurio_version, self.settings.cache_dir)
        self._workdir = Path(tempfile.mkdtemp(prefix="progress-control-schema-registry-"))
        last_error: SchemaRegistryStartError | None = None
        for _ in range(_START_ATTEMPTS):
            host = self.settings.host
            self._port = free_port(host, self.settings.port, quiet=not self.settings.port)
            self._management_port = free_port(
                host,
                self.settings.management_port,
                avoid={self._port},
                quiet=not self.settings.management_port,
            )
            try:
                self._launch(java, distribution)
                self._wait_ready()
            except SchemaRegistryStartError as exc:
                self._terminate()
                last_error = exc
                if not _PORT_TAKEN.search(str(exc)):
                    break
                logger.warning("schema registry port was taken while starting; retrying")
            else:
                atexit.register(self.stop)
                return self
        self._cleanup_workdir()
        assert last_error is not None
        raise last_error

    def stop(self) -> None:
        """Stop the registry (SIGTERM, then SIGKILL after a grace period); its schemas go with
        it."""
        atexit.unregister(self.stop)
        self._terminate()
        self._cleanup_workdir()

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` of the registry's log (its console output)."""
        if self._workdir is None:
            return ""
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def __enter__(self) -> EmbeddedSchemaRegistry:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- internals ----------------------------------------------------------------------------

    def _system_properties(self) -> dict[str, str]:
        host = self.settings.host
        return {
            "quarkus.http.host": host,
            "quarkus.http.port": str(self._port),
            "quarkus.management.host": host,
            "quarkus.management.port": str(self._management_port),
            # Confluent's default; Apicurio's is no rule at all.
            "apicurio.rules.global.compatibility": "BACKWARD",
            # Apicurio's pattern prints the month as "11+00" (an "x", a zone offset, in it).
            "quarkus.log.console.format": "%d{yyyy-MM-dd HH:mm:ss,SSS} %p [%c{3.}] (%t) %m%n",
            **self.settings.properties,
        }

    def _launch(self, java: Path, distribution: Path) -> None:
        assert self._workdir is not None
        command = [
            str(java),
            f"-Xmx{self.settings.heap}",
            # C1 only: start-up takes half as long, and a dev registry needs no peak throughput.
            "-XX:TieredStopAtLevel=1",
            *(f"-D{key}={value}" for key, value in self._system_properties().items()),
            "-jar",
            str(distribution / _LAUNCHER),
        ]
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self._workdir,
                start_new_session=True,  # Ctrl-C in a terminal reaches us, and we stop it cleanly
                preexec_fn=die_with_parent,  # noqa: PLW1509 - only async-signal-safe prctl
            )

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.settings.startup_timeout_s
        # Straight to the loopback port, whatever proxy the environment names.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise SchemaRegistryStartError(
                    f"schema registry exited with code {self._process.returncode} while "
                    f"starting.\n{self.log_tail()}"
                )
            if accepts_connections(self.settings.host, self._port):
                with (
                    contextlib.suppress(OSError, urllib.error.URLError),
                    opener.open(f"{self.url}/subjects", timeout=5) as response,
                ):
                    if response.status == 200:
                        return
            time.sleep(0.2)
        raise SchemaRegistryStartError(
            f"schema registry on {self.settings.host}:{self._port} was not ready within "
            f"{self.settings.startup_timeout_s:.0f}s.\n{self.log_tail()}"
        )

    def _terminate(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            stop_process_group(process, _STOP_TIMEOUT_S, "schema registry")

    def _cleanup_workdir(self) -> None:
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
