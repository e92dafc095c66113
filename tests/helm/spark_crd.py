"""The sessionization SparkApplication (sparkSessionization.*): the least values that render it,
and its check against the Spark operator's v1beta2 API (the CRD is not in kubernetes-validate's
schemas).
"""

from __future__ import annotations

import re
from typing import Any

from tests.helm.chart import (
    KUBE_VERSION,
    Manifest,
    one,
    validate_strictly,
)

SPARK_API_VERSION = "sparkoperator.k8s.io/v1beta2"
# Fields of the Spark operator's v1beta2 API (api/v1beta2/sparkapplication_types.go): the CRD is
# not in kubernetes-validate's schemas, so unknown fields are caught against these sets.
SPARK_SPEC_FIELDS = {
    "type", "sparkVersion", "mode", "proxyUser", "image", "imagePullPolicy", "imagePullSecrets",
    "mainClass", "mainApplicationFile", "arguments", "sparkConf", "hadoopConf", "sparkConfigMap",
    "hadoopConfigMap", "volumes", "driver", "executor", "deps", "restartPolicy", "nodeSelector",
    "failureRetries", "retryInterval", "pythonVersion", "memoryOverheadFactor", "monitoring",
    "batchScheduler", "timeToLiveSeconds", "batchSchedulerOptions", "sparkUIOptions",
    "driverIngressOptions", "dynamicAllocation",
}  # fmt: skip
SPARK_REQUIRED_SPEC_FIELDS = {
    # Required by the CRD (type, sparkVersion, mainApplicationFile, driver, executor), plus what
    # a runnable application of this chart needs (mode, image).
    "type", "mode", "image", "mainApplicationFile", "sparkVersion", "driver", "executor",
}  # fmt: skip
SPARK_POD_FIELDS = {
    "template", "cores", "coreLimit", "memory", "memoryOverhead", "gpu", "image", "configMaps",
    "secrets", "env", "envVars", "envFrom", "envSecretKeyRefs", "labels", "annotations",
    "volumeMounts", "affinity", "tolerations", "podSecurityContext", "securityContext",
    "schedulerName", "sidecars", "initContainers", "hostNetwork", "nodeSelector", "dnsConfig",
    "terminationGracePeriodSeconds", "serviceAccount", "hostAliases", "shareProcessNamespace",
    "runtimeClassName",
}  # fmt: skip
SPARK_DRIVER_FIELDS = SPARK_POD_FIELDS | {
    "podName", "coreRequest", "javaOptions", "lifecycle", "kubernetesMaster",
    "serviceAnnotations", "serviceLabels", "ports", "priorityClassName",
}  # fmt: skip
SPARK_EXECUTOR_FIELDS = SPARK_POD_FIELDS | {
    "instances", "coreRequest", "javaOptions", "lifecycle", "deleteOnTermination", "ports",
    "priorityClassName",
}  # fmt: skip
SPARK_RESTART_FIELDS = {
    "type", "onFailureRetries", "onFailureRetryInterval", "onSubmissionFailureRetries",
    "onSubmissionFailureRetryInterval",
}  # fmt: skip

ENABLE_SPARK = [
    "--set",
    "sparkSessionization.enabled=true,sparkSessionization.image.repository=registry.example.com/"
    "spark,sparkSessionization.storage.claimName=sessionization-data",
]
"""The least that renders the SparkApplication."""


def spark_application(manifests: list[Manifest]) -> Manifest:
    """The one SparkApplication, checked with check_spark_application."""
    app = one(manifests, "SparkApplication")
    check_spark_application(app)
    return app


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def check_spark_application(app: Manifest) -> None:
    """Check a SparkApplication against the v1beta2 API, then its Kubernetes core types strictly.

    The driver's and the executors' pods as the operator's webhook would build them (volumes,
    mounts, security contexts, labels, CPU quantities, ServiceAccount) are validated as Pods
    with kubernetes-validate, so the core types embedded in the custom resource are strict too.
    """
    assert app["apiVersion"] == SPARK_API_VERSION
    assert app["kind"] == "SparkApplication"
    assert set(app) == {"apiVersion", "kind", "metadata", "spec"}
    name = app["metadata"]["name"]
    # The operator names the UI Service "<name>-ui-svc", which must be a DNS-1035 label.
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name)
    assert len(f"{name}-ui-svc") <= 63
    spec = app["spec"]
    assert set(spec) <= SPARK_SPEC_FIELDS, set(spec) - SPARK_SPEC_FIELDS
    missing = SPARK_REQUIRED_SPEC_FIELDS - set(spec)
    assert not missing, f"SparkApplication without {sorted(missing)}"
    assert spec["type"] == "Python"
    assert spec["mode"] == "cluster"
    for field in ("image", "mainApplicationFile", "sparkVersion"):
        assert isinstance(spec[field], str), field
        assert spec[field], field
    assert re.fullmatch(r"\d+\.\d+\.\d+", spec["sparkVersion"])
    assert re.fullmatch(r"[a-z][a-z0-9+.-]*://.+", spec["mainApplicationFile"])
    assert spec["imagePullPolicy"] in {"Always", "IfNotPresent", "Never"}
    assert _is_str_list(spec["arguments"])
    assert _is_str_list(spec.get("imagePullSecrets", []))
    assert all(
        isinstance(k, str) and isinstance(v, str) for k, v in spec.get("sparkConf", {}).items()
    )
    assert "deps" not in spec  # the image carries the connector jars

    policy = spec["restartPolicy"]
    assert set(policy) <= SPARK_RESTART_FIELDS
    assert policy["type"] in {"Never", "OnFailure", "Always"}
    for field in ("onFailureRetries", "onSubmissionFailureRetries"):
        assert isinstance(policy.get(field, 0), int)
        assert policy.get(field, 0) >= 0
    for field in ("onFailureRetryInterval", "onSubmissionFailureRetryInterval"):
        assert isinstance(policy.get(field, 1), int)
        assert policy.get(field, 1) >= 1

    volumes = {v["name"] for v in spec.get("volumes", [])}
    for role, fields in (("driver", SPARK_DRIVER_FIELDS), ("executor", SPARK_EXECUTOR_FIELDS)):
        pod = spec[role]
        assert set(pod) <= fields, f"{role}: {set(pod) - fields}"
        assert isinstance(pod["cores"], int)
        assert pod["cores"] >= 1
        for field in ("memory", "memoryOverhead", "coreRequest", "coreLimit", "serviceAccount"):
            assert isinstance(pod.get(field, ""), str), f"{role}.{field}"
        assert re.fullmatch(r"\d+[kmgtp]b?", pod["memory"].lower()), pod["memory"]
        mounts = pod.get("volumeMounts", [])
        assert {m["name"] for m in mounts} <= volumes, f"{role} mounts a volume not in spec.volumes"
        resources: dict[str, dict[str, str]] = {}
        if "coreRequest" in pod:
            resources["requests"] = {"cpu": pod["coreRequest"]}
        if "coreLimit" in pod:
            resources["limits"] = {"cpu": pod["coreLimit"]}
        as_pod: Manifest = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{name}-{role}", "labels": pod["labels"]},
            "spec": {
                "securityContext": pod["podSecurityContext"],
                "imagePullSecrets": [{"name": s} for s in spec.get("imagePullSecrets", [])],
                "containers": [
                    {
                        "name": f"spark-kubernetes-{role}",
                        "image": spec["image"],
                        "imagePullPolicy": spec["imagePullPolicy"],
                        "securityContext": pod["securityContext"],
                        "volumeMounts": mounts,
                        "envFrom": pod.get("envFrom", []),
                        "resources": resources,
                    }
                ],
                "volumes": [
                    v for v in spec.get("volumes", []) if v["name"] in {m["name"] for m in mounts}
                ],
            },
        }
        if "serviceAccount" in pod:
            as_pod["spec"]["serviceAccountName"] = pod["serviceAccount"]
        validate_strictly([as_pod], KUBE_VERSION)
    assert isinstance(spec["executor"]["instances"], int)
    assert spec["executor"]["instances"] >= 1
    assert "serviceAccount" in spec["driver"]  # the driver creates the executor pods
