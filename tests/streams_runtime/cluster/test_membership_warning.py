"""Unauthenticated membership records are a warning only where queries are served off
loopback; a single instance on a developer's machine gets an info line."""

from __future__ import annotations

import logging

import pytest

from streams_runtime.cluster.replicator import unauthenticated_membership_level


@pytest.mark.parametrize(
    ("application_server", "level"),
    [
        (None, logging.INFO),
        ("127.0.0.1:0", logging.INFO),
        ("localhost:8080", logging.INFO),
        ("[::1]:8080", logging.INFO),
        ("10.0.0.5:8080", logging.WARNING),
        ("app-0.app.svc:8080", logging.WARNING),
    ],
)
def test_unauthenticated_membership_is_a_warning_off_loopback_only(
    application_server: str | None, level: int
) -> None:
    assert unauthenticated_membership_level(application_server) == level
