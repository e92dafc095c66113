"""The runtime's signing settings (no broker): the interceptor's and the sidecar's rules under the
runtime's names, the trust policy of its own repartition topics, and the start-up check that
catches a runtime that would reject its own ticks (issue 24, point 4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from progress_control.settings import ConfigurationError, load_settings
from progress_control.trust import (
    ControlRecordSource,
    ControlRecordValidator,
    SigningKey,
    TrustPolicy,
    Verdict,
)
from streams_runtime.settings import RuntimeSettings

OPS_SECRET = "ops-secret-of-at-least-16-bytes"  # noqa: S105 - a test value
RUNTIME_SECRET = "runtime-secret-of-16-bytes-or-more"  # noqa: S105 - a test value
REQUIRED = {"application_id": "a", "bootstrap_servers": "b:1"}


def _settings(**values: object) -> RuntimeSettings:
    return load_settings(RuntimeSettings, **REQUIRED, **values)


def _error(**values: object) -> str:
    with pytest.raises(ConfigurationError) as excinfo:
        _settings(**values)
    return str(excinfo.value)


def test_signing_key_from_keywords_env_or_a_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert _settings().signing_key is None
    signed = _settings(signing_key_id="runtime-1", signing_key_secret=RUNTIME_SECRET)
    assert signed.signing_key == SigningKey("runtime-1", RUNTIME_SECRET.encode())
    monkeypatch.setenv("PROGRESS_CONTROL_RUNTIME_SIGNING_KEY_ID", "runtime-2")
    monkeypatch.setenv("PROGRESS_CONTROL_RUNTIME_SIGNING_KEY_SECRET", RUNTIME_SECRET)
    assert _settings().signing_key == SigningKey("runtime-2", RUNTIME_SECRET.encode())
    monkeypatch.delenv("PROGRESS_CONTROL_RUNTIME_SIGNING_KEY_SECRET")
    (tmp_path / "key").write_text(RUNTIME_SECRET + "\n")
    monkeypatch.setenv("PROGRESS_CONTROL_RUNTIME_SIGNING_KEY_FILE", str(tmp_path / "key"))
    assert _settings().signing_key == SigningKey("runtime-2", RUNTIME_SECRET.encode())


@pytest.mark.parametrize(
    ("values", "names"),
    [
        (
            {"signing_key_secret": RUNTIME_SECRET},
            ["signing_key_id (env PROGRESS_CONTROL_RUNTIME_SIGNING_KEY_ID)", "required"],
        ),
        (
            {"signing_key_id": "runtime-1"},
            [
                "signing_key_secret (env PROGRESS_CONTROL_RUNTIME_SIGNING_KEY_SECRET)",
                "signing_key_file (env PROGRESS_CONTROL_RUNTIME_SIGNING_KEY_FILE)",
            ],
        ),
        (
            {"signing_key_id": "runtime-1", "signing_key_secret": RUNTIME_SECRET[:15]},
            ["PROGRESS_CONTROL_RUNTIME_SIGNING_KEY_SECRET", "at least 16 bytes"],
        ),
        (
            {
                "signing_key_id": "runtime-1",
                "signing_key_secret": RUNTIME_SECRET,
                "signing_key_file": "/run/key",
            },
            ["not both"],
        ),
        (
            {"signing_key_id": "runtime-1", "signing_key_file": "/nope/key"},
            ["PROGRESS_CONTROL_RUNTIME_SIGNING_KEY_FILE", "/nope/key"],
        ),
    ],
)
def test_the_interceptors_rules_under_the_runtimes_names(
    values: dict[str, object], names: list[str]
) -> None:
    message = _error(**values)
    for name in names:
        assert name in message
    assert "progress.control." not in message  # not the interceptor's spelling
    assert RUNTIME_SECRET[:15] not in message


def test_the_interceptors_signing_keys_are_refused_with_the_runtimes_names() -> None:
    message = _error(kafka={"progress.control.signing.key.id": "k"})
    assert "signing_key_id and signing_key_secret" in message


def test_settings_never_show_a_secret() -> None:
    settings = _settings(
        signing_key_id="runtime-1",
        signing_key_secret=RUNTIME_SECRET,
        control_verification_keys=f"ops-1:{OPS_SECRET}",
    )
    for shown in (
        repr(settings),
        str(settings),
        str(settings.model_dump()),
        repr(settings.signing_key),
        repr(settings.internal_trust_policy()),
    ):
        assert RUNTIME_SECRET not in shown
        assert OPS_SECRET not in shown


def test_own_key_id_among_the_verification_keys_needs_the_same_secret() -> None:
    message = _error(
        signing_key_id="ops-1",
        signing_key_secret=RUNTIME_SECRET,
        control_verification_keys=f"ops-1:{OPS_SECRET}",
    )
    assert "signing_key_id (env PROGRESS_CONTROL_RUNTIME_SIGNING_KEY_ID)" in message
    assert "control_verification_keys" in message
    assert RUNTIME_SECRET not in message
    assert OPS_SECRET not in message
    # The same secret is fine: a runtime whose key is also its upstream's.
    same = _settings(
        signing_key_id="ops-1",
        signing_key_secret=OPS_SECRET,
        control_verification_keys=f"ops-1:{OPS_SECRET}",
    )
    assert same.signing_key == SigningKey("ops-1", OPS_SECRET.encode())


def test_internal_topics_accept_the_runtimes_own_key_and_any_of_its_sources(
    tmp_path: Path,
) -> None:
    (tmp_path / "keys").write_text(f"ops-2:{OPS_SECRET}-two\n")
    settings = _settings(
        signing_key_id="runtime-1",
        signing_key_secret=RUNTIME_SECRET,
        control_verification_keys=f"ops-1:{OPS_SECRET}",
        control_verification_keys_file=tmp_path / "keys",
        control_allowed_sources="producer-1",
        max_control_skew_ms=1234,
    )
    inputs, internal = settings.trust_policy(), settings.internal_trust_policy()
    assert dict(inputs.verification_keys) == {
        "ops-1": OPS_SECRET.encode(),
        "ops-2": f"{OPS_SECRET}-two".encode(),
    }
    assert dict(internal.verification_keys) == {
        **inputs.verification_keys,
        "runtime-1": RUNTIME_SECRET.encode(),
    }
    assert inputs.allowed_sources == {"producer-1"}
    assert internal.allowed_sources is None  # its own source ids are per process
    assert internal.max_skew_ms == inputs.max_skew_ms == 1234

    # What the runtime writes verifies on its repartition topics, and not on its inputs (whose
    # readers were not given its key): a downstream reader needs the runtime's key.
    assert settings.signing_key is not None
    record = ControlRecordSource("streams:a:host:1", signing_key=settings.signing_key).record(
        "a-repartition", 3, 1_000
    )
    own = ControlRecordValidator(internal).check("a-repartition", 3, 1_000, record.headers)
    assert own is Verdict.ACCEPTED
    upstream = ControlRecordValidator(inputs).check("a-repartition", 3, 1_000, record.headers)
    assert upstream is Verdict.SOURCE_NOT_ALLOWED
    unrestricted = ControlRecordValidator(TrustPolicy(verification_keys=inputs.verification_keys))
    verdict = unrestricted.check("a-repartition", 3, 1_000, record.headers)
    assert verdict is Verdict.UNKNOWN_KEY


def test_internal_policy_of_a_runtime_with_a_key_and_no_verification_keys() -> None:
    settings = _settings(signing_key_id="runtime-1", signing_key_secret=RUNTIME_SECRET)
    assert not settings.trust_policy().verification_keys
    # Only its own signed ticks move time on its own topics: nobody else writes them.
    internal = settings.internal_trust_policy()
    assert dict(internal.verification_keys) == {"runtime-1": RUNTIME_SECRET.encode()}
    unsigned = ControlRecordSource("someone").record("a-repartition", 0, 1_000)
    verdict = ControlRecordValidator(internal).check("a-repartition", 0, 1_000, unsigned.headers)
    assert verdict is Verdict.UNSIGNED


def test_internal_policy_without_a_signing_key_is_the_inputs_minus_the_allow_list() -> None:
    settings = _settings(
        control_verification_keys=f"ops-1:{OPS_SECRET}",
        control_allowed_sources="producer-1",
        max_control_skew_ms=99,
    )
    internal, inputs = settings.internal_trust_policy(), settings.trust_policy()
    assert dict(internal.verification_keys) == dict(inputs.verification_keys)
    assert internal.max_skew_ms == 99
    assert internal.allowed_sources is None
    assert _settings().internal_trust_policy() == _settings().trust_policy()


def test_start_up_check_names_a_runtime_that_would_reject_its_own_ticks(tmp_path: Path) -> None:
    keyed = _settings(control_verification_keys=f"ops-1:{OPS_SECRET}")
    problem = keyed.signing_problem(has_repartition_topics=True)
    assert problem is not None
    for name in (
        "control_verification_keys (env PROGRESS_CONTROL_RUNTIME_CONTROL_VERIFICATION_KEYS)",
        "signing_key_id (env PROGRESS_CONTROL_RUNTIME_SIGNING_KEY_ID)",
        "signing_key_secret",
        "signing_key_file",
        "unsigned",
        "progress_propagation",
    ):
        assert name in problem
    assert OPS_SECRET not in problem
    # Keys from a file count as well.
    (tmp_path / "keys").write_text(f"ops-1:{OPS_SECRET}")
    from_file = _settings(control_verification_keys_file=tmp_path / "keys")
    assert from_file.signing_problem(has_repartition_topics=True) is not None

    # No problem: no repartition topic, no verification keys, a signing key, or no ticks at all.
    assert keyed.signing_problem(has_repartition_topics=False) is None
    assert _settings().signing_problem(has_repartition_topics=True) is None
    signed = _settings(
        control_verification_keys=f"ops-1:{OPS_SECRET}",
        signing_key_id="runtime-1",
        signing_key_secret=RUNTIME_SECRET,
    )
    assert signed.signing_problem(has_repartition_topics=True) is None
    quiet = _settings(control_verification_keys=f"ops-1:{OPS_SECRET}", progress_propagation=False)
    assert quiet.signing_problem(has_repartition_topics=True) is None
