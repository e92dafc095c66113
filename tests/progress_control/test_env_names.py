"""Unknown ``PROGRESS_CONTROL_*`` variables fail at settings load, naming the closest valid one."""

from __future__ import annotations

import re
import subprocess

import pytest
from pydantic_settings import BaseSettings

from interceptor import Producer
from interceptor.settings import InterceptorSettings
from progress_control.env_names import COMPONENT_FIELDS, DICT_FIELDS, unknown_variables
from progress_control.settings import ConfigurationError, load_settings
from progress_control_apps.dev.broker import BrokerSettings
from progress_control_apps.dev.schema_registry import SchemaRegistrySettings
from progress_control_apps.spark.settings import SparkJobSettings, load_job_settings
from sidecar.settings import SidecarSettings
from streams_runtime.settings import RuntimeSettings
from tests.paths import ROOT

COMPONENTS: list[type[BaseSettings]] = [
    InterceptorSettings,
    SidecarSettings,
    RuntimeSettings,
    SparkJobSettings,
    BrokerSettings,
    SchemaRegistrySettings,
]


def test_the_table_lists_every_components_fields() -> None:
    fields: dict[str, set[str]] = {}
    dicts: dict[str, set[str]] = {}
    for cls in COMPONENTS:
        prefix = str(cls.model_config["env_prefix"])
        fields.setdefault(prefix, set()).update(cls.model_fields)
        dicts.setdefault(prefix, set()).update(
            name
            for name, field in cls.model_fields.items()
            if getattr(field.annotation, "__origin__", None) is dict
        )
    assert {p: set(f) for p, f in COMPONENT_FIELDS.items()} == fields
    assert {p: set(f) for p, f in DICT_FIELDS.items()} == {p: d for p, d in dicts.items() if d}


def test_every_name_the_project_mentions_is_known() -> None:
    # Code, docs, chart and tools (tests plant typos and test-only classes on purpose).
    files = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    prefixes = {p.rstrip("_") for p in COMPONENT_FIELDS}  # "PROGRESS_CONTROL_RUNTIME_" in prose
    # Misspellings shown as examples of the check (README, env_names.py).
    typos = {"PROGRESS_CONTROL_WATCH_INTERVAL", "PROGRESS_CONTROL_KAFKA_BOOTSTRAP_SERVERS"}
    mentioned: set[str] = set()
    for name in files:
        if name.startswith("tests/") or not (ROOT / name).is_file():
            continue
        try:
            text = (ROOT / name).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        mentioned.update(re.findall(r"PROGRESS_CONTROL_[A-Z0-9_]*[A-Z0-9]", text))
    assert unknown_variables({name: "" for name in mentioned - prefixes - typos}) == []


def test_a_misspelt_variable_names_the_closest_valid_one() -> None:
    assert unknown_variables({"PROGRESS_CONTROL_WATCH_INTERVAL": "5"}) == [
        "unknown environment variable PROGRESS_CONTROL_WATCH_INTERVAL "
        "(did you mean PROGRESS_CONTROL_WATCH_INTERVAL_MS?)"
    ]
    assert unknown_variables({"PROGRESS_CONTROL_RUNTIME_APLICATION_ID": "a"}) == [
        "unknown environment variable PROGRESS_CONTROL_RUNTIME_APLICATION_ID "
        "(did you mean PROGRESS_CONTROL_RUNTIME_APPLICATION_ID?)"
    ]
    assert unknown_variables({"PROGRESS_CONTROL_KAFKA_SASL_PASSWORD": "x"}) == [
        "unknown environment variable PROGRESS_CONTROL_KAFKA_SASL_PASSWORD "
        "(did you mean PROGRESS_CONTROL_KAFKA__SASL_PASSWORD?)"
    ]
    assert unknown_variables({"PROGRESS_CONTROL_ZZZZ": "x"}) == [
        "unknown environment variable PROGRESS_CONTROL_ZZZZ"
    ]


def test_valid_names_pass() -> None:
    environ = {
        "PROGRESS_CONTROL_START_MS": "1",
        "progress_control_end_ms": "2",  # pydantic-settings ignores case
        "PROGRESS_CONTROL_KAFKA__SASL_MECHANISM": "PLAIN",
        "PROGRESS_CONTROL_RUNTIME_CONSUMER__GROUP_INSTANCE_ID": "a",
        "PROGRESS_CONTROL_BROKER_SERVER_PROPERTIES__NODE_ID": "1",
        "PROGRESS_CONTROL_SPARK_MAX_CONTROL_SKEW_MS": "1",
        "PROGRESS_CONTROL_CONFIG_FILE": "/etc/pc.yaml",
        "PROGRESS_CONTROL_AUTOLOAD": "1",
        "PROGRESS_CONTROL_TEST_BROKER": "jar",
        "OTHER": "x",
    }
    assert unknown_variables(environ) == []


def test_the_loaded_classes_own_fields_count() -> None:
    class Writer(BaseSettings):
        model_config = {"env_prefix": "PROGRESS_CONTROL_WRITER_"}
        signing_key_id: str | None = None

    environ = {"PROGRESS_CONTROL_WRITER_SIGNING_KEY_ID": "w"}
    assert unknown_variables(environ, Writer) == []
    assert unknown_variables(environ) != []


@pytest.mark.parametrize(
    "load",
    [
        lambda: InterceptorSettings.from_config({}),
        lambda: SidecarSettings.from_config({"progress.control.kafka": {"bootstrap.servers": "b"}}),
        lambda: load_settings(RuntimeSettings, application_id="a", bootstrap_servers="b"),
        load_job_settings,
        lambda: load_settings(BrokerSettings),
    ],
    ids=["interceptor", "sidecar", "runtime", "spark", "broker"],
)
def test_every_component_fails_on_an_unknown_variable(
    monkeypatch: pytest.MonkeyPatch, load: object
) -> None:
    monkeypatch.setenv("PROGRESS_CONTROL_WATCH_INTERVAL", "5000")
    with pytest.raises(ConfigurationError) as excinfo:
        load()  # type: ignore[operator]
    assert str(excinfo.value) == (
        "unknown environment variable PROGRESS_CONTROL_WATCH_INTERVAL "
        "(did you mean PROGRESS_CONTROL_WATCH_INTERVAL_MS?)"
    )


def test_the_interceptor_treats_it_as_an_invalid_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    # As an invalid progress.control.* value: the producer's construction fails, naming it.
    monkeypatch.setenv("PROGRESS_CONTROL_STRAT_MS", "5000")
    with pytest.raises(ConfigurationError, match="did you mean PROGRESS_CONTROL_START_MS"):
        Producer({"bootstrap.servers": "127.0.0.1:1"})
