"""Fetch Java artifacts from Maven Central into a local cache, once.

A :class:`JarSet` names a pom template shipped with the package and the version to put in it.
:func:`fetch_jars` runs ``mvn dependency:copy-dependencies`` into a staging directory, writes a
manifest of every jar's size and SHA-256, and renames the directory into place. Later calls only
verify the manifest, so a warm start needs neither Maven nor the network; a cache that fails the
check (a deleted or truncated jar, a missing manifest) is fetched again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from importlib import metadata, resources
from pathlib import Path

from progress_control.settings import default_cache_dir
from progress_control_apps.dev.cache import fill_once

__all__ = [
    "APICURIO_CONVERTER_VERSION",
    "CONNECT_VERSION",
    "KAFKA_VERSION",
    "JarFetchError",
    "JarSet",
    "MissingToolError",
    "apicurio_avro_converter_jars",
    "build_maven_project",
    "classpath",
    "fetch_jars",
    "find_java",
    "find_maven",
    "find_tool",
    "kafka_broker_jars",
    "kafka_connect_jars",
    "spark_kafka_connector_jars",
]

KAFKA_VERSION = "4.4.0"
"""Apache Kafka release the embedded broker runs (newest 4.x on Maven Central when pinned)."""

_MANIFEST = "MANIFEST.json"
_BUILT = "COMPLETE"  # a Maven project's build finished (build_maven_project)
_MAVEN_TIMEOUT_S = 900


class MissingToolError(RuntimeError):
    """A program the project needs (Java, Maven) is not installed."""


class JarFetchError(RuntimeError):
    """Maven could not resolve a jar set."""


@dataclass(frozen=True, slots=True)
class JarSet:
    """A pom template (in ``progress_control_apps/dev/poms``) and the version substituted into
    it."""

    name: str
    pom: str
    version: str
    description: str

    @property
    def directory_name(self) -> str:
        return f"{self.name}-{self.version}"


def kafka_broker_jars(version: str = KAFKA_VERSION) -> JarSet:
    """Jars of an Apache Kafka broker plus a log4j2 SLF4J binding."""
    return JarSet("kafka-broker", "kafka-broker.xml", version, f"Apache Kafka {version} broker")


CONNECT_VERSION = "4.3.1"
"""Kafka Connect release of the Connect tests: the newest whose ``connect-file`` (FileStreamSink) is
on Maven Central (4.4.0's is not published there); its clients talk to the 4.4 broker."""


def kafka_connect_jars(version: str = CONNECT_VERSION) -> JarSet:
    """Jars of a Kafka Connect standalone worker (``ConnectStandalone``) with the file connectors
    and the bundled transforms and predicates; no connector plugin path is needed."""
    return JarSet("kafka-connect", "kafka-connect.xml", version, f"Kafka Connect {version}")


APICURIO_CONVERTER_VERSION = "2.6.13.Final"
"""Apicurio Registry release of the Kafka Connect converters in the Connect tests: the newest whose
dependency tree resolves from Maven Central (3.0.9's parent pom is not there, nor 3.3.3's
serdes). It talks to the registry's Apicurio v2 API, which Apicurio Registry 3 still serves."""


def apicurio_avro_converter_jars(version: str = APICURIO_CONVERTER_VERSION) -> JarSet:
    """Apicurio Registry's Kafka Connect converters (``AvroConverter``) with their serdes and
    registry client, without Kafka's artifacts and SLF4J: a Connect plugin directory
    (``plugin.path``), the worker providing those."""
    return JarSet(
        "apicurio-converter",
        "apicurio-avro-converter.xml",
        version,
        f"Apicurio Registry {version} Kafka Connect converters",
    )


def spark_kafka_connector_jars(version: str | None = None) -> JarSet:
    """``spark-sql-kafka-0-10_2.13`` and ``spark-avro_2.13`` (``from_avro``) at the installed
    pyspark version, with their runtime deps. The cache directory is named after the set, not the
    Kafka connector alone, so a cache filled before the Avro module joined is fetched again."""
    spark_version = version or metadata.version("pyspark")
    return JarSet(
        "spark-connectors",
        "spark-kafka-connector.xml",
        spark_version,
        f"Spark {spark_version} Kafka and Avro connectors",
    )


def find_java() -> Path:
    """The ``java`` launcher: ``$JAVA_HOME/bin/java``, else ``java`` on ``PATH``."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return Path(java_home) / "bin" / "java"
    found = shutil.which("java")
    if found is None:
        raise MissingToolError(
            "Java was not found (no $JAVA_HOME/bin/java, no `java` on PATH). The embedded Kafka "
            "broker needs a Java 17+ runtime: install one (e.g. `apt-get install openjdk-17-jre`) "
            "or set JAVA_HOME."
        )
    return Path(found)


def find_tool(command: str, override_env: str, missing: str) -> Path:
    """``$override_env`` when it names a file, else ``command`` on ``PATH``; otherwise raise
    :class:`MissingToolError` with ``missing`` (what it is for and how to install it)."""
    override = os.environ.get(override_env)
    found = override if override and Path(override).is_file() else shutil.which(command)
    if found is None:
        raise MissingToolError(f"{missing} (no `{command}` on PATH, {override_env} unset).")
    return Path(found)


def find_maven() -> Path:
    """The ``mvn`` launcher: ``$PROGRESS_CONTROL_MVN``, else ``mvn`` on ``PATH``."""
    return find_tool(
        "mvn",
        "PROGRESS_CONTROL_MVN",
        "Maven was not found. It is needed once to fetch jars from Maven Central into the cache: "
        "install Maven (e.g. `apt-get install maven`) or set PROGRESS_CONTROL_MVN to the launcher",
    )


def fetch_jars(jar_set: JarSet, cache_dir: Path | None = None, *, quiet: bool = False) -> Path:
    """Return the directory holding ``jar_set``'s jars, fetching them first when needed."""
    target = (cache_dir or default_cache_dir()) / "jars" / jar_set.directory_name

    def build(staging: Path) -> None:
        _copy_dependencies(jar_set, staging)
        _write_manifest(staging)

    announce = (
        f"Fetching {jar_set.description} jars from Maven Central into {target} (first run only)..."
    )
    return fill_once(target, _is_complete, build, None if quiet else announce)


def classpath(directory: Path) -> str:
    """A ``java -cp`` value for every jar of a fetched set."""
    return os.pathsep.join(str(jar) for jar in sorted(directory.glob("*.jar")))


def _copy_dependencies(jar_set: JarSet, staging: Path) -> None:
    mvn = find_maven()
    poms = resources.files("progress_control_apps.dev").joinpath("poms")
    template = poms.joinpath(jar_set.pom).read_text()
    pom = staging / "pom.xml"
    pom.write_text(template.replace("@VERSION@", jar_set.version))
    command = [
        str(mvn),
        "--batch-mode",
        "--no-transfer-progress",
        "-f",
        str(pom),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={staging}",
        "-DincludeScope=runtime",
    ]
    local_repo = os.environ.get("PROGRESS_CONTROL_MAVEN_REPO")
    if local_repo:
        command.append(f"-Dmaven.repo.local={local_repo}")
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=_MAVEN_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise JarFetchError(f"Maven did not finish within {_MAVEN_TIMEOUT_S}s: {command}") from exc
    pom.unlink()
    if result.returncode != 0 or not any(staging.glob("*.jar")):
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-25:])
        raise JarFetchError(
            f"Maven could not resolve {jar_set.description} (exit {result.returncode}):\n{tail}"
        )


def _write_manifest(directory: Path) -> None:
    jars = {jar.name: _digest(jar) for jar in sorted(directory.glob("*.jar"))}
    (directory / _MANIFEST).write_text(json.dumps(jars, indent=1, sort_keys=True))


def _is_complete(directory: Path) -> bool:
    try:
        expected = json.loads((directory / _MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(expected, dict) or not expected:
        return False
    present = {jar.name for jar in directory.glob("*.jar")}
    if present != set(expected):
        return False
    return all(_digest(directory / name) == want for name, want in expected.items())


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            sha.update(chunk)
    return f"{path.stat().st_size}:{sha.hexdigest()}"


def build_maven_project(
    source_dir: Path, cache_subdir: str, what: str, *, module: str | None = None
) -> Path:
    """The directory of the jars of the Maven project in ``source_dir`` (its own and its runtime
    dependencies), built into ``<cache>/<cache_subdir>/<name>-<digest of the sources>`` the
    first time, so a change of source means a new build and nothing built is committed.
    ``what`` names the project in messages. A ``target/`` directory (a local ``mvn`` run's
    output, in any module) is neither part of the digest nor copied.

    With ``module``, ``source_dir`` holds a multi-module build and only that module and the
    modules it needs are built (``mvn -pl <module> -am``); the jars are that module's, its
    runtime dependencies' (sibling modules' jars among them) and nothing of the other modules.
    The digest covers the whole ``source_dir``, so a change in a shared module rebuilds every
    module's jars."""
    digest = _sources_digest(source_dir)
    name = "kstreams" if module is None else module
    target = default_cache_dir() / cache_subdir / f"{name}-{digest}"

    def build(staging: Path) -> None:
        project = staging / "project"
        shutil.copytree(source_dir, project, ignore=shutil.ignore_patterns("target"))
        lib = staging / "lib"
        command = [
            str(find_maven()),
            "--batch-mode",
            "--no-transfer-progress",
            "--quiet",
            "-f",
            str(project / "pom.xml"),
        ]
        if module is not None:
            command += ["-pl", module, "-am"]
        command += [
            "package",
            "-DskipTests",
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={lib}",
        ]
        local_repo = os.environ.get("PROGRESS_CONTROL_MAVEN_REPO")
        if local_repo:
            command.append(f"-Dmaven.repo.local={local_repo}")
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=_MAVEN_TIMEOUT_S, check=False
        )
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-30:])
            raise RuntimeError(f"building {what} failed:\n{tail}")
        built_dir = project if module is None else project / module
        for jar in (built_dir / "target").glob("*.jar"):
            shutil.move(jar, lib / jar.name)
        shutil.rmtree(project)
        (staging / _BUILT).write_text("")

    built = fill_once(
        target,
        lambda directory: (directory / _BUILT).is_file(),
        build,
        f"Building {what} into {target} (first run only)...",
    )
    return built / "lib"


def _sources_digest(source_dir: Path) -> str:
    """A digest of every file under ``source_dir`` (names and contents), ``target/`` folders
    left out at any depth."""
    sha = hashlib.sha256()
    sources = (p for p in source_dir.rglob("*") if "target" not in p.relative_to(source_dir).parts)
    for path in sorted(p for p in sources if p.is_file()):
        sha.update(str(path.relative_to(source_dir)).encode())
        sha.update(path.read_bytes())
    return sha.hexdigest()[:16]
