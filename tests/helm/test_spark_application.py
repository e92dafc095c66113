"""The sessionization SparkApplication (sparkSessionization.*): off by default, rendered from
the README's example and from every value, its entry script, RBAC, storage and Secrets, and the
checks that reject bad values.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helm.chart import (
    CHART,
    KUBE_VERSION,
    NAMESPACE,
    RELEASE,
    SCHEMA_ERROR,
    Helm,
    Manifest,
    one,
    validate_strictly,
)
from tests.helm.spark_crd import (
    ENABLE_SPARK,
    check_spark_application,
    spark_application,
)
from tests.paths import ROOT


def parsed_arguments(app: Manifest) -> Any:
    """The SparkApplication's arguments as `python -m progress_control_apps.spark` parses them."""
    from progress_control_apps.spark.cli import build_parser

    return build_parser().parse_args(app["spec"]["arguments"])


def test_spark_application_is_off_by_default(
    default_manifests: list[Manifest], full_manifests: list[Manifest]
) -> None:
    for manifests in (default_manifests, full_manifests):
        kinds = [m["kind"] for m in manifests]
        assert "SparkApplication" not in kinds
        assert not {"ServiceAccount", "Role", "RoleBinding"} & set(kinds)
        assert not [m for m in manifests if m["metadata"]["name"].endswith("-spark-entrypoint")]
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["sparkSessionization"]["enabled"] is False


def test_spark_render_validates_strictly(
    spark_manifests: list[Manifest], readme_spark_manifests: list[Manifest]
) -> None:
    # Everything but the SparkApplication against the Kubernetes schemas, strictly; the
    # SparkApplication against the v1beta2 API (and its core types strictly, as Pods).
    assert sorted(validate_strictly(spark_manifests, KUBE_VERSION)) == ["ConfigMap", "ConfigMap"]
    assert sorted(validate_strictly(readme_spark_manifests, KUBE_VERSION)) == [
        "ConfigMap",
        "ConfigMap",
        "Role",
        "RoleBinding",
        "ServiceAccount",
    ]
    for manifests in (spark_manifests, readme_spark_manifests):
        assert [m["kind"] for m in manifests].count("SparkApplication") == 1
        spark_application(manifests)


def test_spark_application_check_catches_unknown_fields(
    readme_spark_manifests: list[Manifest],
) -> None:
    # The structural check really rejects what the operator's CRD would prune or refuse.
    app = spark_application(readme_spark_manifests)
    for path, value in [
        (("spec", "deps"), {"packages": ["org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"]}),
        (("spec", "driver", "memoryy"), "1g"),
        (("spec", "executor", "cores"), "1"),
        (("spec", "driver", "podSecurityContext", "runAsUserr"), 185),
    ]:
        broken = json.loads(json.dumps(app))
        node = broken
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        with pytest.raises((AssertionError, pytest.fail.Exception)):
            check_spark_application(broken)
    missing = json.loads(json.dumps(app))
    del missing["spec"]["mainApplicationFile"]
    with pytest.raises(AssertionError, match="mainApplicationFile"):
        check_spark_application(missing)


def test_spark_application_from_the_readme_example(readme_spark_manifests: list[Manifest]) -> None:
    app = spark_application(readme_spark_manifests)
    spec = app["spec"]
    assert app["metadata"]["name"] == f"{RELEASE}-progress-control-sessionization"
    assert app["metadata"]["labels"]["app.kubernetes.io/component"] == "spark-sessionization"
    assert app["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
    assert spec["image"] == "registry.example.com/progress-control-spark:0.1.0"
    assert spec["sparkVersion"] == "4.2.0"
    args = parsed_arguments(app)
    assert args.bootstrap_servers == "kafka:9092"  # kafka.bootstrapServers
    assert args.topic == "clicks-enriched"
    assert args.gap == 30_000
    assert args.master == "k8s://https://kubernetes.default.svc:443"
    assert (args.output, args.checkpoint) == ("/data/sessions", "/data/checkpoints")
    assert (args.watermark_delay, args.trigger, args.starting_offsets) == (0, 1000, "earliest")
    assert args.max_offsets_per_trigger is None
    assert args.output_topic is None
    assert args.kafka_option == []
    assert args.conf == [("spark.sql.shuffle.partitions", "16")]
    # sparkConf passes through, every value a string (the CRD's map[string]string).
    assert spec["sparkConf"] == {"spark.sql.streaming.metricsEnabled": "true"}
    assert spec["restartPolicy"] == {
        "type": "OnFailure",
        "onFailureRetries": 3,
        "onFailureRetryInterval": 10,
        "onSubmissionFailureRetries": 5,
        "onSubmissionFailureRetryInterval": 20,
    }
    driver, executor = spec["driver"], spec["executor"]
    assert (driver["cores"], driver["memory"]) == (1, "1g")
    assert (executor["instances"], executor["cores"], executor["memory"]) == (2, 1, "4g")
    for pod in (driver, executor):
        assert not {"coreRequest", "coreLimit", "memoryOverhead"} & set(pod)
        assert pod["podSecurityContext"]["runAsNonRoot"] is True
        assert pod["podSecurityContext"]["runAsUser"] == 185
        assert pod["podSecurityContext"]["fsGroup"] == 185
        assert pod["securityContext"]["allowPrivilegeEscalation"] is False
        assert pod["securityContext"]["capabilities"]["drop"] == ["ALL"]
        assert pod["labels"]["app.kubernetes.io/component"] == "spark-sessionization"
    # The checkpoint volume: the existing claim on the driver and every executor.
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["data"] == {
        "name": "data",
        "persistentVolumeClaim": {"claimName": "sessionization-data"},
    }
    data_mount = {"name": "data", "mountPath": "/data"}
    assert data_mount in driver["volumeMounts"]
    assert executor["volumeMounts"] == [data_mount]


def test_spark_application_from_every_value(spark_manifests: list[Manifest]) -> None:
    app = spark_application(spark_manifests)
    spec = app["spec"]
    assert spec["image"] == "registry.example.com/progress-control-spark:0.1.0-spark4.2.0"
    assert spec["imagePullPolicy"] == "Always"
    assert spec["imagePullSecrets"] == ["registry-credentials"]
    arguments = spec["arguments"]
    assert arguments[0] == "stream"
    for option, value in [
        ("--bootstrap-servers", "broker-0.kafka:9093"),
        ("--topic", "clicks-enriched"),
        ("--gap", "45s"),
    ]:
        assert arguments[arguments.index(option) + 1] == value
    args = parsed_arguments(app)
    assert args.bootstrap_servers == "broker-0.kafka:9093"
    assert args.topic == "clicks-enriched"
    assert args.gap == 45_000
    assert (args.output, args.checkpoint) == ("/data/spark/sessions", "/data/spark/checkpoints")
    assert (args.watermark_delay, args.trigger) == (5_000, 2_000)
    assert args.starting_offsets == "latest"
    assert args.max_offsets_per_trigger == 100_000
    assert args.output_topic == "sessions-spark"
    assert args.kafka_option == [
        ("failOnDataLoss", "false"),
        ("kafka.security.protocol", "SSL"),
    ]
    assert args.conf == [("spark.sql.shuffle.partitions", "16")]
    assert args.run_for == 12 * 3_600_000  # extraArgs
    assert spec["sparkConf"] == {
        "spark.executor.extraJavaOptions": "-XX:+UseG1GC",
        "spark.kubernetes.executor.deleteOnTermination": "false",
        "spark.sql.streaming.metricsEnabled": "true",
    }
    assert spec["restartPolicy"] == {
        "type": "Always",
        "onFailureRetries": 10,
        "onFailureRetryInterval": 30,
        "onSubmissionFailureRetries": 3,
        "onSubmissionFailureRetryInterval": 60,
    }
    driver, executor = spec["driver"], spec["executor"]
    assert {k: driver[k] for k in ("cores", "coreRequest", "coreLimit", "memory")} == {
        "cores": 1,
        "coreRequest": "500m",
        "coreLimit": "1200m",
        "memory": "2g",
    }
    assert driver["memoryOverhead"] == "512m"
    assert {k: executor[k] for k in ("instances", "cores", "coreRequest", "coreLimit")} == {
        "instances": 3,
        "cores": 2,
        "coreRequest": "1500m",
        "coreLimit": "2",
    }
    assert (executor["memory"], executor["memoryOverhead"]) == ("4g", "1g")
    # An existing ServiceAccount: no RBAC rendered.
    assert driver["serviceAccount"] == "spark-operator-spark"
    kinds = [m["kind"] for m in spark_manifests]
    assert not {"ServiceAccount", "Role", "RoleBinding", "Deployment"} & set(kinds)
    assert driver["labels"]["team"] == "streaming"  # commonLabels
    assert app["metadata"]["labels"]["team"] == "streaming"
    assert {"name": "data", "mountPath": "/data"} in executor["volumeMounts"]


def test_spark_driver_runs_the_entry_script(
    readme_spark_manifests: list[Manifest], tmp_path: Path
) -> None:
    app = spark_application(readme_spark_manifests)
    spec = app["spec"]
    # mainApplicationFile is the script of the chart's ConfigMap, mounted on the driver.
    [config_map] = [
        m for m in readme_spark_manifests if m["metadata"]["name"].endswith("-spark-entrypoint")
    ]
    [(file_name, script)] = config_map["data"].items()
    [volume] = [v for v in spec["volumes"] if "configMap" in v]
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    [mount] = [m for m in spec["driver"]["volumeMounts"] if m["name"] == volume["name"]]
    assert mount["readOnly"] is True
    assert spec["mainApplicationFile"] == f"local://{mount['mountPath']}/{file_name}"
    assert volume["name"] not in {m["name"] for m in spec["executor"]["volumeMounts"]}
    assert config_map["metadata"]["labels"]["app.kubernetes.io/component"] == (
        "spark-sessionization"
    )

    # spark-submit runs `python3 <file> <arguments>`: the script hands them to
    # progress_control_apps.spark's CLI.
    path = tmp_path / file_name
    path.write_text(script)
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT)}

    def run(*arguments: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(path), *arguments],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=120,
            check=False,
        )

    result = run("stream", "--help")
    assert result.returncode == 0, result.stderr
    assert "usage: python -m progress_control_apps.spark stream" in result.stdout
    # The rendered arguments reach the parser: with an invalid gap it exits 2 naming --gap.
    arguments = list(spec["arguments"])
    arguments[arguments.index("--gap") + 1] = "30x"
    result = run(*arguments)
    assert result.returncode == 2
    assert "argument --gap: not a duration: '30x'" in result.stderr


def test_spark_driver_service_account_and_rbac(readme_spark_manifests: list[Manifest]) -> None:
    app = spark_application(readme_spark_manifests)
    account = one(readme_spark_manifests, "ServiceAccount")
    role = one(readme_spark_manifests, "Role")
    binding = one(readme_spark_manifests, "RoleBinding")
    name = account["metadata"]["name"]
    assert name == f"{RELEASE}-progress-control-spark"
    assert app["spec"]["driver"]["serviceAccount"] == name
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]
    [rule] = role["rules"]
    assert rule["apiGroups"] == [""]
    assert {"pods", "services", "configmaps"} <= set(rule["resources"])
    assert {"create", "delete", "get", "list", "watch"} <= set(rule["verbs"])
    for manifest in (account, role, binding):
        assert manifest["metadata"]["labels"]["app.kubernetes.io/component"] == (
            "spark-sessionization"
        )


@pytest.mark.parametrize(
    ("args", "volume", "entrypoint"),
    [
        (
            ["--set", "sparkSessionization.storage.type=emptyDir"],
            {"name": "data", "emptyDir": {}},
            True,
        ),
        (
            [
                "--set",
                "sparkSessionization.storage.type=emptyDir,"
                "sparkSessionization.storage.sizeLimit=10Gi",
            ],
            {"name": "data", "emptyDir": {"sizeLimit": "10Gi"}},
            True,
        ),
        (
            [
                "--set",
                "sparkSessionization.storage.type=none,"
                "sparkSessionization.output=s3a://bucket/sessions,"
                "sparkSessionization.checkpoint=s3a://bucket/checkpoints",
            ],
            None,
            True,
        ),
        (
            [
                "--set",
                "sparkSessionization.storage.type=none,"
                "sparkSessionization.output=s3a://bucket/sessions,"
                "sparkSessionization.checkpoint=s3a://bucket/checkpoints,"
                "sparkSessionization.mainApplicationFile=local:///app/stream.py",
            ],
            None,
            False,
        ),
    ],
    ids=["empty-dir", "empty-dir-size-limit", "object-storage", "own-main-file"],
)
def test_spark_storage_and_entry_script_variants(
    helm: Helm, args: list[str], volume: dict[str, Any] | None, entrypoint: bool
) -> None:
    manifests = helm.render(*ENABLE_SPARK, *args)
    validate_strictly(manifests, KUBE_VERSION)
    app = spark_application(manifests)
    spec = app["spec"]
    data = [v for v in spec.get("volumes", []) if v["name"] == "data"]
    assert data == ([volume] if volume else [])
    executor_mounts = spec["executor"].get("volumeMounts", [])
    assert executor_mounts == ([{"name": "data", "mountPath": "/data"}] if volume else [])
    config_maps = [m["metadata"]["name"] for m in manifests if m["kind"] == "ConfigMap"]
    assert any(n.endswith("-spark-entrypoint") for n in config_maps) is entrypoint
    if entrypoint:
        assert spec["mainApplicationFile"].startswith("local:///opt/progress-control/spark/")
    else:
        assert spec["mainApplicationFile"] == "local:///app/stream.py"
        assert "volumes" not in spec
        assert "volumeMounts" not in spec["driver"]


def test_spark_image_tag_defaults_to_the_app_version(helm: Helm) -> None:
    app = spark_application(helm.render(*ENABLE_SPARK))
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert app["spec"]["image"] == f"registry.example.com/spark:{version}"
    app = spark_application(helm.render(*ENABLE_SPARK, "--set", "image.tag=9.9.9"))
    assert app["spec"]["image"] == "registry.example.com/spark:9.9.9"  # follows the chart's tag


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "sparkSessionization.bogus=1"], "bogus"),
        (["--set", "sparkSessionization.driver.gpu=1"], "gpu"),
        (["--set", "sparkSessionization.gap=30"], "'/sparkSessionization/gap': got number, want"),
        (["--set", "sparkSessionization.gap=30x"], "at '/sparkSessionization/gap'"),
        (["--set", "sparkSessionization.gap=0s"], "at '/sparkSessionization/gap'"),
        (["--set", "sparkSessionization.watermarkDelay=5"], "watermarkDelay"),
        (["--set", "sparkSessionization.sparkVersion=4.2"], "sparkVersion"),
        (["--set", "sparkSessionization.executor.instances=0"], "instances"),
        (["--set", "sparkSessionization.driver.memory=2GiB"], "memory"),
        (["--set", "sparkSessionization.restartPolicy.type=Sometimes"], "restartPolicy"),
        (["--set", "sparkSessionization.storage.type=hostPath"], "storage"),
        (["--set", "sparkSessionization.mainApplicationFile=/app/x.py"], "mainApplicationFile"),
        (["--set", "sparkSessionization.topic=a b"], "topic"),
        (
            ["--set-json", 'sparkSessionization.sparkConf={"executor.memory":"2g"}'],
            "invalid propertyName 'executor.memory'",
        ),
        (
            ["--set-json", 'sparkSessionization.jobConf={"sql.shuffle":"1"}'],
            "invalid propertyName 'sql.shuffle'",
        ),
        (
            ["--set", "sparkSessionization.enabled=true,sparkSessionization.storage.claimName=c"],
            "at '/sparkSessionization/image/repository': minLength",
        ),
        (
            [
                "--set",
                "sparkSessionization.enabled=true,sparkSessionization.image.repository=r/spark",
            ],
            "at '/sparkSessionization/storage/claimName': minLength",
        ),
        (
            [*ENABLE_SPARK, "--set", "sparkSessionization.serviceAccount.create=false"],
            "at '/sparkSessionization/serviceAccount/name': minLength",
        ),
    ],
    ids=[
        "unknown-key",
        "unknown-nested-key",
        "gap-as-number",
        "gap-bad-unit",
        "gap-zero",
        "delay-without-unit",
        "version-as-number",
        "no-executors",
        "kubernetes-memory-unit",
        "restart-policy-enum",
        "storage-type-enum",
        "main-file-not-a-uri",
        "topic-with-space",
        "spark-conf-not-spark",
        "job-conf-not-spark",
        "enabled-without-image",
        "enabled-without-claim",
        "enabled-without-service-account",
    ],
)
def test_spark_schema_rejects(helm: Helm, args: list[str], message: str) -> None:
    stderr = helm.rejected(*args)
    assert SCHEMA_ERROR in stderr
    assert message in stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--set", "sparkSessionization.checkpoint=/tmp/checkpoints"],
            "sparkSessionization.checkpoint (/tmp/checkpoints) must be under storage.mountPath",
        ),
        (
            ["--set", "sparkSessionization.storage.mountPath=/mnt"],
            "sparkSessionization.output (/data/sessions) must be under storage.mountPath (/mnt)",
        ),
        (
            ["--set", "sparkSessionization.storage.type=none"],
            "sparkSessionization.output (/data/sessions) is a local path but storage.type is none",
        ),
    ],
    ids=["checkpoint-off-the-volume", "output-off-the-volume", "local-path-without-volume"],
)
def test_spark_template_checks_reject(helm: Helm, args: list[str], message: str) -> None:
    assert message in helm.rejected(*ENABLE_SPARK, *args)


def test_spark_driver_and_executors_take_secrets(spark_manifests: list[Manifest]) -> None:
    # check_spark_application validates envFrom, the mounts and the Secret volumes strictly,
    # inside the driver's and the executors' Pods.
    spec = spark_application(spark_manifests)["spec"]
    env_from = [
        {"secretRef": {"name": "spark-kafka-sasl"}},
        {"configMapRef": {"name": "spark-settings"}, "prefix": "APP_"},
    ]
    mount = {"name": "control-keys", "mountPath": "/etc/progress-control/keys", "readOnly": True}
    for role in ("driver", "executor"):
        assert spec[role]["envFrom"] == env_from, role
        assert mount in spec[role]["volumeMounts"], role
    [volume] = [v for v in spec["volumes"] if v["name"] == "control-keys"]
    assert volume["secret"] == {"secretName": "control-verification-keys", "defaultMode": 0o444}


def test_spark_secret_mounts_without_storage(helm: Helm) -> None:
    manifests = helm.render(
        *ENABLE_SPARK,
        "--set",
        "sparkSessionization.storage.type=none,sparkSessionization.output=s3a://b/s,"
        "sparkSessionization.checkpoint=s3a://b/c,"
        "sparkSessionization.mainApplicationFile=local:///app/stream.py",
        "--set-json",
        'sparkSessionization.secretMounts=[{"name":"keys","secret":"k","mountPath":"/keys"}]',
    )
    spec = spark_application(manifests)["spec"]
    assert [v["name"] for v in spec["volumes"]] == ["keys"]
    for role in ("driver", "executor"):
        assert spec[role]["volumeMounts"] == [
            {"name": "keys", "mountPath": "/keys", "readOnly": True}
        ]
        assert "envFrom" not in spec[role]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            '[{"name":"data","secret":"s","mountPath":"/keys"}]',
            "names a volume data, which is taken",
        ),
        ('[{"name":"k","secret":"s","mountPath":"/data"}]', "mounts k at /data, which is taken"),
    ],
    ids=["volume-name-clash", "mount-path-clash"],
)
def test_spark_secret_mount_checks_reject(helm: Helm, value: str, message: str) -> None:
    stderr = helm.rejected(*ENABLE_SPARK, "--set-json", f"sparkSessionization.secretMounts={value}")
    assert message in stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set-json", 'sparkSessionization.envFrom=[{"secretRef":{}}]'], "envFrom"),
        (["--set-json", 'sparkSessionization.envFrom=[{"prefix":"A_"}]'], "envFrom"),
        (
            ["--set-json", 'sparkSessionization.secretMounts=[{"name":"k","secret":"s"}]'],
            "mountPath",
        ),
    ],
    ids=["ref-without-name", "no-source", "mount-without-path"],
)
def test_spark_secret_schema_rejects(helm: Helm, args: list[str], message: str) -> None:
    stderr = helm.rejected(*args)
    assert SCHEMA_ERROR in stderr
    assert message in stderr
