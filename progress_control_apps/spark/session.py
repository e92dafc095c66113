"""A SparkSession with Spark's Kafka connector on the classpath, from the project's jar cache.

The connector (``org.apache.spark:spark-sql-kafka-0-10_2.13`` at the installed pyspark version)
and its dependencies are fetched once by :mod:`progress_control_apps.dev.jars`; Spark gets the
local jar files through ``spark.jars``, so it never resolves packages over the network itself.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import SparkSession

from progress_control_apps.dev.jars import fetch_jars, spark_kafka_connector_jars

__all__ = [
    "DEFAULT_APP_NAME",
    "QUIET_LOGGERS",
    "connector_jars",
    "spark_jars_dir",
    "spark_session",
]

DEFAULT_APP_NAME = "kafka-progress-control"

QUIET_LOGGERS: dict[str, str] = {
    # "Current batch is falling behind. The trigger interval is 1000 milliseconds, but spent
    # 1203 milliseconds": logged for any micro-batch longer than the trigger interval, which is
    # normal for the first batch of a backlog or on a busy laptop. The next batch simply starts
    # at once; what matters (input rate vs processing rate) is in the query progress.
    "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor": "error",
    # "Failed to cancel job group <run id>. Cannot find active jobs for it.": logged for every
    # query stopped between micro-batches, which is how SessionizationStream.stop() stops them
    # (a stop within a micro-batch kills its tasks and logs InterruptedException traces). Its
    # other warnings ("Broadcasting large task binary ...") are hints, not failures; a failed
    # job still fails the query, which raises.
    "org.apache.spark.scheduler.DAGScheduler": "error",
}
"""Driver loggers the sessions make quieter (log4j2 name: level), because what they say at
WARN is normal operation. Applied when the session starts unless the log4j2 configuration names
the logger already (yours wins); in the ``log_file`` configuration too."""

_VERSIONED_JAR = re.compile(r"^(?P<artifact>.+?)-\d[^/]*\.jar$")
_LOCAL_MASTER = re.compile(r"^local(\[(?P<threads>\*|\d+)(,\d+)?\])?$")


def spark_jars_dir() -> Path:
    """The jars Spark itself runs with: ``$SPARK_HOME/jars``, else the pyspark package's."""
    spark_home = os.environ.get("SPARK_HOME")
    if spark_home and (Path(spark_home) / "jars").is_dir():
        return Path(spark_home) / "jars"
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def connector_jars(cache_dir: Path | None = None) -> list[Path]:
    """Local paths of the Kafka connector jars Spark lacks, fetched into the cache when needed.

    Maven resolves the connector's dependencies independently of Spark's own classpath, so the
    set also holds artifacts Spark already ships (scala-library, hadoop-client, lz4, ...) at other
    versions. Those are left out: two versions of one library on a classpath is how
    ``NoSuchMethodError`` happens, and Spark's own version is the one it was built against.
    """
    directory = fetch_jars(spark_kafka_connector_jars(), cache_dir, quiet=True)
    shipped = {_artifact(jar.name) for jar in spark_jars_dir().glob("*.jar")}
    return [jar for jar in sorted(directory.glob("*.jar")) if _artifact(jar.name) not in shipped]


def spark_session(
    master: str = "local[*]",
    app_name: str = DEFAULT_APP_NAME,
    conf: Mapping[str, str] | None = None,
    *,
    cache_dir: Path | None = None,
    log_file: Path | None = None,
) -> SparkSession:
    """Get or create a SparkSession that can read and write Kafka.

    ``master`` is any Spark master URL (``local[2]``, ``spark://host:7077``, ``k8s://...``,
    ``yarn``). Defaults: UTC session time zone, no-data micro-batches on (a watermark advanced by
    control records must be able to close sessions without new data), WARN logging; for local
    masters also few shuffle partitions (one per core: the default 200 tiny tasks per micro-batch
    dominate a laptop-sized job) and no UI. Every entry of ``conf`` is passed through and wins.

    ``log_file``: the driver's log4j2 output goes to this file instead of the console (stderr),
    through a log4j2 configuration written beside it (``<log_file>.log4j2.properties``).

    Static settings (master, jars, driver memory, ``log_file``) only apply when this call starts
    the JVM; a session already running in this process is returned with the runtime settings of
    ``conf`` applied.
    """
    settings: dict[str, str] = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.streaming.noDataMicroBatches.enabled": "true",
        "spark.log.level": "WARN",
    }
    local = _LOCAL_MASTER.match(master)
    if local is not None:
        threads = local["threads"]
        cores = (os.cpu_count() or 1) if threads in (None, "*") else int(threads)
        settings |= {
            "spark.sql.shuffle.partitions": str(max(1, cores)),
            "spark.default.parallelism": str(max(1, cores)),
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.memory": "2g",
        }
    extra = dict(conf or {})
    jars = [str(jar) for jar in connector_jars(cache_dir)]
    if extra.get("spark.jars"):
        jars.append(extra.pop("spark.jars"))
    settings["spark.jars"] = ",".join(jars)
    if log_file is not None:
        options = f"-Dlog4j2.configurationFile={_log4j2_file_config(log_file).as_uri()}"
        user_options = extra.pop("spark.driver.extraJavaOptions", "")
        settings["spark.driver.extraJavaOptions"] = f"{options} {user_options}".strip()
    settings |= extra

    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark: SparkSession = builder.getOrCreate()
    _quiet_loggers(spark)
    return spark


def _quiet_loggers(spark: SparkSession) -> None:
    """Set the levels of :data:`QUIET_LOGGERS` in the driver's log4j2, except for loggers its
    configuration sets itself."""
    jvm = getattr(spark.sparkContext, "_jvm", None)
    if jvm is None:  # Spark Connect: the server's log configuration decides
        return
    log4j = jvm.org.apache.logging.log4j
    configured = log4j.LogManager.getContext(False).getConfiguration().getLoggers()
    for name, level in QUIET_LOGGERS.items():
        if not configured.containsKey(name):
            log4j.core.config.Configurator.setLevel(name, log4j.Level.toLevel(level.upper()))


def _log4j2_file_config(log_file: Path) -> Path:
    """Write a log4j2 configuration that appends every Spark log line to ``log_file``."""
    log_file = log_file.absolute()
    log_file.parent.mkdir(parents=True, exist_ok=True)
    config = log_file.with_name(f"{log_file.name}.log4j2.properties")
    # status=error: log4j2's own notices stay quiet too. The level is Spark's usual console
    # default; spark.log.level (WARN above) applies on top once the context starts.
    config.write_text(
        "\n".join(
            [
                "status = error",
                "name = progress-control-spark",
                "appender.file.type = File",
                "appender.file.name = file",
                f"appender.file.fileName = {log_file}",
                "appender.file.append = true",
                "appender.file.layout.type = PatternLayout",
                "appender.file.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex",
                "rootLogger.level = warn",
                "rootLogger.appenderRef.file.ref = file",
                *(
                    line
                    for i, (name, level) in enumerate(QUIET_LOGGERS.items())
                    for line in (
                        f"logger.quiet{i}.name = {name}",
                        f"logger.quiet{i}.level = {level}",
                    )
                ),
                "",
            ]
        )
    )
    return config


def _artifact(jar_name: str) -> str:
    match = _VERSIONED_JAR.match(jar_name)
    return match["artifact"] if match else jar_name
