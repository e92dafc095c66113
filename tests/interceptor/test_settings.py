"""Interceptor settings (interceptor/settings.py): config keys, env variables, validation, the
tick schedule, the signing key and the topic filter they describe (no broker)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from interceptor.settings import InterceptorSettings, Mode, split_config
from progress_control.protocol import DEFAULT_SENTINEL_KEY, TimestampMode
from progress_control.settings import ConfigurationError
from progress_control.ticks.schedule import TickSchedule
from progress_control.ticks.topic_filter import TopicFilter
from progress_control.trust import ControlRecordValidator, SigningKey, TrustPolicy, Verdict


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No PROGRESS_CONTROL_* variable of the outer environment leaks into these tests."""
    for name in list(os.environ):
        if name.startswith("PROGRESS_CONTROL_"):
            monkeypatch.delenv(name)


# --- InterceptorSettings.from_config -------------------------------------------------------------


def test_defaults() -> None:
    s = InterceptorSettings.from_config({})
    assert s.enabled is True
    assert s.mode is Mode.TICKS
    assert s.start_ms == 1_000
    assert s.backoff_ms == 1_000
    assert s.backoff_exponential is False
    assert s.backoff_multiplier == 2.0
    assert s.max_records is None
    assert s.end_ms == 3_600_000
    assert s.key == b"__progress_control__" == DEFAULT_SENTINEL_KEY
    assert s.topics_include == ()
    assert s.topics_exclude == ()
    assert s.timestamp_mode is TimestampMode.EXTRAPOLATED
    assert s.report_address == "127.0.0.1:7071"
    assert s.source_id


def test_dotted_config_keys() -> None:
    s = InterceptorSettings.from_config(
        {
            "progress.control.start.ms": 5_000,
            "progress.control.backoff.ms": "250",
            "progress.control.backoff.exponential": "false",
            "progress.control.backoff.multiplier": 1.5,
            "progress.control.max.records": None,
            "progress.control.end.ms": 60_000,
            "progress.control.mode": "report",
            "progress.control.timestamp.mode": "wall-clock",
            "progress.control.report.address": "localhost:9999",
            "progress.control.source.id": "app-1",
            "bootstrap.servers": "ignored:9092",
            "linger.ms": 5,
        }
    )
    assert s.start_ms == 5_000
    assert s.backoff_ms == 250
    assert s.backoff_exponential is False
    assert s.backoff_multiplier == 1.5
    assert s.max_records is None
    assert s.end_ms == 60_000
    assert s.mode is Mode.REPORT
    assert s.timestamp_mode is TimestampMode.WALL_CLOCK
    assert s.report_address == "localhost:9999"
    assert s.source_id == "app-1"


def test_env_variables_and_config_keys_win_over_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROGRESS_CONTROL_START_MS", "5000")
    monkeypatch.setenv("PROGRESS_CONTROL_BACKOFF_EXPONENTIAL", "false")
    monkeypatch.setenv("PROGRESS_CONTROL_KEY", "tick")
    from_env = InterceptorSettings.from_config({})
    assert from_env.start_ms == 5_000
    assert from_env.backoff_exponential is False
    assert from_env.key == b"tick"

    config = {"progress.control.start.ms": 7_000, "progress.control.key": "mine"}
    overridden = InterceptorSettings.from_config(config)
    assert overridden.start_ms == 7_000
    assert overridden.key == b"mine"
    assert overridden.backoff_exponential is False  # still from env


def test_unrelated_progress_control_env_variables_are_ignored(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PROGRESS_CONTROL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PROGRESS_CONTROL_BROKER_PORT", "19092")
    assert InterceptorSettings.from_config({}).start_ms == 1_000


def test_topic_lists_are_comma_separated_regexes() -> None:
    s = InterceptorSettings.from_config(
        {
            "progress.control.topics.include": " clicks , orders\\..* ,,",
            "progress.control.topics.exclude": "orders\\.internal",
        }
    )
    assert s.topics_include == ("clicks", "orders\\..*")
    assert s.topics_exclude == ("orders\\.internal",)
    accept = TopicFilter(s.topics_include, s.topics_exclude)
    assert accept("clicks")
    assert accept("orders.eu")
    assert not accept("orders.internal")
    assert not accept("payments")


def test_topic_lists_also_accept_sequences() -> None:
    s = InterceptorSettings.from_config({"progress.control.topics.exclude": ["a", "b.*"]})
    assert s.topics_exclude == ("a", "b.*")


@pytest.mark.parametrize("value", ["", None, b"", "null"])
def test_empty_or_null_key_means_a_null_key(value: object) -> None:
    assert InterceptorSettings.from_config({"progress.control.key": value}).key is None


def test_empty_key_from_env_means_a_null_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROGRESS_CONTROL_KEY", "")
    assert InterceptorSettings.from_config({}).key is None


def test_string_key_is_utf8_encoded() -> None:
    assert InterceptorSettings.from_config({"progress.control.key": "tick€"}).key == (
        "tick€".encode()
    )


def test_null_key_topics_get_null_key_ticks_and_others_the_sentinel() -> None:
    s = InterceptorSettings.from_config({"progress.control.null.key.topics": "orders, avro-.*"})
    assert s.null_key_topics == ("orders", "avro-.*")
    source = s.control_record_source()
    assert source.record("orders", 0, 1).key is None
    assert source.record("avro-clicks", 0, 1).key is None
    assert source.record("clicks", 0, 1).key == DEFAULT_SENTINEL_KEY
    assert InterceptorSettings.from_config({}).control_record_source().key_for("x") is not None


def test_null_key_topics_must_be_regexes() -> None:
    with pytest.raises(ConfigurationError, match=r"progress\.control\.null\.key\.topics"):
        InterceptorSettings.from_config({"progress.control.null.key.topics": "a("})


def test_max_records_may_be_unset_when_end_ms_is_set() -> None:
    s = InterceptorSettings.from_config(
        {"progress.control.max.records": None, "progress.control.end.ms": 30_000}
    )
    assert s.max_records is None
    assert s.end_ms == 30_000


def _error(config: dict[str, Any]) -> str:
    with pytest.raises(ConfigurationError) as excinfo:
        InterceptorSettings.from_config(config)
    return str(excinfo.value)


@pytest.mark.parametrize(
    ("config", "key", "env"),
    [
        (
            {"progress.control.start.ms": "soon"},
            "progress.control.start.ms",
            "PROGRESS_CONTROL_START_MS",
        ),
        (
            {"progress.control.start.ms": 1.5},
            "progress.control.start.ms",
            "PROGRESS_CONTROL_START_MS",
        ),
        (
            {"progress.control.start.ms": 0},
            "progress.control.start.ms",
            "PROGRESS_CONTROL_START_MS",
        ),
        (
            {"progress.control.backoff.ms": -1},
            "progress.control.backoff.ms",
            "PROGRESS_CONTROL_BACKOFF_MS",
        ),
        (
            {"progress.control.backoff.multiplier": 0.5},
            "progress.control.backoff.multiplier",
            "PROGRESS_CONTROL_BACKOFF_MULTIPLIER",
        ),
        (
            {"progress.control.max.records": 0},
            "progress.control.max.records",
            "PROGRESS_CONTROL_MAX_RECORDS",
        ),
        (
            {"progress.control.topics.include": "clicks,(unclosed"},
            "progress.control.topics.include",
            "PROGRESS_CONTROL_TOPICS_INCLUDE",
        ),
        (
            {"progress.control.topics.exclude": "*bad"},
            "progress.control.topics.exclude",
            "PROGRESS_CONTROL_TOPICS_EXCLUDE",
        ),
        (
            {"progress.control.timestamp.mode": "event-time"},
            "progress.control.timestamp.mode",
            "PROGRESS_CONTROL_TIMESTAMP_MODE",
        ),
        (
            {"progress.control.mode": "both"},
            "progress.control.mode",
            "PROGRESS_CONTROL_MODE",
        ),
        (
            {"progress.control.report.address": "localhost"},
            "progress.control.report.address",
            "PROGRESS_CONTROL_REPORT_ADDRESS",
        ),
        (
            {"progress.control.report.address": "localhost:70000"},
            "progress.control.report.address",
            "PROGRESS_CONTROL_REPORT_ADDRESS",
        ),
        (
            {"progress.control.report.address": ":7071"},
            "progress.control.report.address",
            "PROGRESS_CONTROL_REPORT_ADDRESS",
        ),
        (
            {"progress.control.key": 42},
            "progress.control.key",
            "PROGRESS_CONTROL_KEY",
        ),
        (
            {"progress.control.strat.ms": 5_000},
            "progress.control.strat.ms",
            "PROGRESS_CONTROL_STRAT_MS",
        ),
    ],
)
def test_invalid_values_name_the_key_and_the_env_variable(
    config: dict[str, Any], key: str, env: str
) -> None:
    message = _error(config)
    assert key in message
    assert env in message


def test_invalid_env_value_names_the_key_and_the_env_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PROGRESS_CONTROL_START_MS", "ten")
    message = _error({})
    assert "progress.control.start.ms" in message
    assert "PROGRESS_CONTROL_START_MS" in message
    assert "'ten'" in message


def test_every_problem_is_reported_at_once() -> None:
    message = _error({"progress.control.start.ms": "x", "progress.control.backoff.ms": "y"})
    assert "progress.control.start.ms" in message
    assert "progress.control.backoff.ms" in message


def test_unbounded_schedule_is_rejected() -> None:
    message = _error({"progress.control.max.records": None, "progress.control.end.ms": None})
    assert "max.records" in message
    assert "end.ms" in message


def test_unbounded_schedule_error_names_the_keys_and_env_variables() -> None:
    message = _error({"progress.control.max.records": None, "progress.control.end.ms": None})
    assert "progress.control.max.records" in message
    assert "PROGRESS_CONTROL_MAX_RECORDS" in message
    assert "progress.control.end.ms" in message
    assert "PROGRESS_CONTROL_END_MS" in message


def test_unbounded_schedule_from_env_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROGRESS_CONTROL_MAX_RECORDS", "")
    monkeypatch.setenv("PROGRESS_CONTROL_END_MS", "")
    message = _error({})
    assert "progress.control.max.records" in message
    assert "PROGRESS_CONTROL_MAX_RECORDS" in message


def test_end_ms_before_start_ms_is_rejected() -> None:
    message = _error({"progress.control.start.ms": 10_000, "progress.control.end.ms": 5_000})
    assert "progress.control.end.ms" in message
    assert "PROGRESS_CONTROL_END_MS" in message
    assert "progress.control.start.ms" in message
    assert "PROGRESS_CONTROL_START_MS" in message


def test_end_ms_before_start_ms_from_env_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROGRESS_CONTROL_END_MS", "500")
    message = _error({})  # start.ms defaults to 1 s
    assert "PROGRESS_CONTROL_END_MS" in message
    assert "PROGRESS_CONTROL_START_MS" in message


def test_end_ms_equal_to_start_ms_is_accepted() -> None:
    s = InterceptorSettings.from_config(
        {"progress.control.start.ms": 5_000, "progress.control.end.ms": 5_000}
    )
    assert s.end_ms == s.start_ms == 5_000


@pytest.mark.parametrize("unset", ["", "none", "null", "None", " NULL "])
def test_max_records_and_end_ms_can_be_unset_by_strings(unset: str) -> None:
    s = InterceptorSettings.from_config(
        {"progress.control.max.records": unset, "progress.control.end.ms": 60_000}
    )
    assert s.max_records is None
    assert s.end_ms == 60_000
    s = InterceptorSettings.from_config(
        {"progress.control.end.ms": unset, "progress.control.max.records": 10}
    )
    assert s.end_ms is None
    assert s.max_records == 10


@pytest.mark.parametrize("unset", ["", "none", "null"])
def test_env_can_unset_max_records_when_end_ms_is_set(
    monkeypatch: pytest.MonkeyPatch, unset: str
) -> None:
    monkeypatch.setenv("PROGRESS_CONTROL_MAX_RECORDS", unset)
    monkeypatch.setenv("PROGRESS_CONTROL_END_MS", "60000")
    s = InterceptorSettings.from_config({})
    assert s.max_records is None
    assert s.end_ms == 60_000
    # A config key still wins over the env variable.
    assert InterceptorSettings.from_config({"progress.control.max.records": 3}).max_records == 3


def test_env_none_leaves_end_ms_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROGRESS_CONTROL_END_MS", "none")
    monkeypatch.setenv("PROGRESS_CONTROL_MAX_RECORDS", "10")
    assert InterceptorSettings.from_config({}).end_ms is None


@pytest.mark.parametrize("value", ["never", "0", "-5"])
def test_other_strings_for_optional_bounds_are_still_invalid(value: str) -> None:
    message = _error({"progress.control.max.records": value})
    assert "progress.control.max.records" in message
    message = _error({"progress.control.end.ms": value})
    assert "progress.control.end.ms" in message


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("clicks,orders", ("clicks", "orders")),
        (" clicks , orders\\..* ,,", ("clicks", "orders\\..*")),
        ("clicks", ("clicks",)),
        ("", ()),
        (",", ()),
    ],
)
def test_topic_lists_from_env_are_comma_separated(
    monkeypatch: pytest.MonkeyPatch, value: str, expected: tuple[str, ...]
) -> None:
    monkeypatch.setenv("PROGRESS_CONTROL_TOPICS_INCLUDE", value)
    monkeypatch.setenv("PROGRESS_CONTROL_TOPICS_EXCLUDE", value)
    s = InterceptorSettings.from_config({})
    assert s.topics_include == expected
    assert s.topics_exclude == expected


def test_topic_list_env_is_overridden_by_the_config_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROGRESS_CONTROL_TOPICS_EXCLUDE", "a,b")
    s = InterceptorSettings.from_config({"progress.control.topics.exclude": "c"})
    assert s.topics_exclude == ("c",)


def test_invalid_regex_in_topic_list_env_names_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PROGRESS_CONTROL_TOPICS_EXCLUDE", "ok,(unclosed")
    message = _error({})
    assert "progress.control.topics.exclude" in message
    assert "PROGRESS_CONTROL_TOPICS_EXCLUDE" in message


def test_tick_schedule_follows_the_settings() -> None:
    s = InterceptorSettings.from_config(
        {
            "progress.control.start.ms": 5_000,
            "progress.control.backoff.ms": 250,
            "progress.control.backoff.exponential": True,
            "progress.control.backoff.multiplier": 3,
            "progress.control.max.records": "none",
            "progress.control.end.ms": 60_000,
        }
    )
    assert s.tick_schedule() == TickSchedule(5_000, 250, True, 3.0, None, 60_000)
    defaults = InterceptorSettings.from_config({}).tick_schedule()
    # A tick each second of idleness, up to an hour.
    assert [defaults.offset_ms(n) for n in range(3)] == [1_000, 2_000, 3_000]
    assert defaults.offset_ms(3_599) == 3_600_000
    assert defaults.offset_ms(3_600) is None


def test_split_config() -> None:
    ours, theirs = split_config(
        {
            "bootstrap.servers": "localhost:9092",
            "progress.control.start.ms": 5_000,
            "linger.ms": 5,
            "progress.control.topics.include": "clicks",
            "progress.controlled": "not ours",
        }
    )
    assert ours == {"progress.control.start.ms": 5_000, "progress.control.topics.include": "clicks"}
    assert theirs == {
        "bootstrap.servers": "localhost:9092",
        "linger.ms": 5,
        "progress.controlled": "not ours",
    }
    assert split_config({}) == ({}, {})


def test_ipv6_report_address_is_accepted_by_the_settings() -> None:
    s = InterceptorSettings.from_config({"progress.control.report.address": "[::1]:7071"})
    assert s.report_address == "[::1]:7071"


def test_the_charts_unix_report_address_is_accepted_from_env(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    address = "unix:///var/run/progress-control/reports.sock"
    monkeypatch.setenv("PROGRESS_CONTROL_REPORT_ADDRESS", address)
    assert InterceptorSettings.from_config({}).report_address == address
    with pytest.raises(ConfigurationError, match="three slashes"):
        InterceptorSettings.from_config({"progress.control.report.address": "unix://x/r.sock"})


# --- signing key ---------------------------------------------------------------------------------

SECRET = "s3cret-of-at-least-16-bytes"  # noqa: S105 - a test value


def test_no_signing_key_by_default() -> None:
    assert InterceptorSettings.from_config({}).signing_key is None


def test_signing_key_from_config_keys() -> None:
    s = InterceptorSettings.from_config(
        {"progress.control.signing.key.id": "k1", "progress.control.signing.key.secret": SECRET}
    )
    assert s.signing_key == SigningKey("k1", SECRET.encode())
    assert SECRET not in repr(s)
    assert SECRET not in repr(s.signing_key)
    assert SECRET not in str(s.model_dump())


def test_signing_key_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROGRESS_CONTROL_SIGNING_KEY_ID", "k2")
    monkeypatch.setenv("PROGRESS_CONTROL_SIGNING_KEY_SECRET", SECRET)
    assert InterceptorSettings.from_config({}).signing_key == SigningKey("k2", SECRET.encode())


def test_signing_secret_from_a_file_without_its_newline(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    secret_file = tmp_path / "signing-secret"
    secret_file.write_text(SECRET + "\n")
    monkeypatch.setenv("PROGRESS_CONTROL_SIGNING_KEY_FILE", str(secret_file))
    s = InterceptorSettings.from_config({"progress.control.signing.key.id": "k3"})
    assert s.signing_key == SigningKey("k3", SECRET.encode())


@pytest.mark.parametrize(
    ("config", "names"),
    [
        (
            {
                "progress.control.signing.key.id": "k",
                "progress.control.signing.key.secret": "x" * 15,
            },
            ["progress.control.signing.key.secret", "at least 16 bytes"],
        ),
        (
            {"progress.control.signing.key.secret": SECRET},
            ["progress.control.signing.key.id", "PROGRESS_CONTROL_SIGNING_KEY_ID"],
        ),
        (
            {"progress.control.signing.key.id": "k"},
            ["progress.control.signing.key.secret", "progress.control.signing.key.file"],
        ),
        (
            {"progress.control.signing.key.id": "k", "progress.control.signing.key.file": "/nope"},
            ["progress.control.signing.key.file", "PROGRESS_CONTROL_SIGNING_KEY_FILE", "/nope"],
        ),
        (
            {
                "progress.control.signing.key.id": "k" * 256,
                "progress.control.signing.key.secret": SECRET,
            },
            ["progress.control.signing.key.id", "PROGRESS_CONTROL_SIGNING_KEY_ID"],
        ),
    ],
)
def test_invalid_signing_settings_fail_naming_the_setting_never_the_secret(
    config: dict[str, Any], names: list[str]
) -> None:
    message = _error(config)
    for name in names:
        assert name in message
    assert SECRET not in message
    assert "x" * 15 not in message


def test_a_secret_and_a_secret_file_are_ambiguous(tmp_path: Path) -> None:
    (tmp_path / "s").write_text(SECRET)
    message = _error(
        {
            "progress.control.signing.key.id": "k",
            "progress.control.signing.key.secret": SECRET,
            "progress.control.signing.key.file": str(tmp_path / "s"),
        }
    )
    assert "not both" in message
    assert SECRET not in message


def test_the_settings_control_record_source_signs_with_their_key() -> None:
    settings = InterceptorSettings.from_config(
        {
            "progress.control.source.id": "producer-7",
            "progress.control.key": "",
            "progress.control.signing.key.id": "ops-1",
            "progress.control.signing.key.secret": SECRET,
        }
    )
    record = settings.control_record_source().record("clicks", 2, 1_000)
    assert record.key is None
    assert (record.marker.source_id, record.marker.key_id, record.marker.version) == (
        "producer-7",
        "ops-1",
        2,
    )
    validator = ControlRecordValidator(TrustPolicy(verification_keys={"ops-1": SECRET.encode()}))
    assert validator.check("clicks", 2, 1_000, record.headers) is Verdict.ACCEPTED
    unsigned = InterceptorSettings.from_config({}).control_record_source()
    assert unsigned.record("clicks", 0, 1_000).marker.version == 1


# --- internal topics -----------------------------------------------------------------------------

INTERNAL = [
    "__consumer_offsets",
    "__transaction_state",
    "_schemas",
    "_confluent-metrics",
    "_confluent-ksql-default__command_topic",
    "connect-offsets",
    "connect-configs",
    "connect-status",
    "connect-cluster-offsets",
    "docker-connect-status",
    "mm2-offsets.source.internal",
    "source.checkpoints.internal",
    "orders-app-counts-store-changelog",
    "orders-app-KSTREAM-AGGREGATE-0000000003-repartition",
    "orders-app-KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000006-topic",
    "orders-app-KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-0000000008-topic",
    "changelog__group--topic--store",
    "repartition__group--topic--op",
    "default_ksql_processing_log",
    "sessions-app-membership",
    "sessions-app-dlq",
]
DATA = ["clicks", "orders", "connect-events", "changelogs", "schemas", "payments.internal.v2"]


def test_internal_and_system_topics_are_excluded_by_default() -> None:
    accept = InterceptorSettings.from_config({}).topic_filter()
    assert [t for t in INTERNAL if accept(t)] == []
    assert [t for t in DATA if accept(t)] == DATA


def test_the_internal_list_can_be_replaced_but_kafka_topics_stay_excluded() -> None:
    s = InterceptorSettings.from_config({"progress.control.topics.internal": "orders"})
    accept = s.topic_filter()
    assert not accept("orders")
    assert accept("orders-app-counts-store-changelog")
    assert not accept("__consumer_offsets")
    everything = InterceptorSettings.from_config({"progress.control.topics.internal": ""})
    assert everything.topics_internal == ()
    assert everything.topic_filter()("_schemas")
    assert not everything.topic_filter()("__transaction_state")


def test_include_cannot_reopen_an_internal_topic() -> None:
    s = InterceptorSettings.from_config({"progress.control.topics.include": ".*-changelog"})
    assert not s.topic_filter()("app-store-changelog")
