"""Which topics get ticks (progress_control/ticks/topic_filter.py): full matches, exclusion
winning over inclusion, and the bounded per-topic cache (no broker)."""

from __future__ import annotations

from progress_control.ticks.topic_filter import TopicFilter


def test_topic_filter_full_match_exclude_wins_empty_include_is_all() -> None:
    everything = TopicFilter((), ())
    assert everything("anything")
    assert everything("")

    exact = TopicFilter(("click",), ())
    assert exact("click")
    assert not exact("clicks")  # full match, not a prefix
    assert not exact("a-click")

    exclude_wins = TopicFilter(("events\\..*",), ("events\\.debug",))
    assert exclude_wins("events.prod")
    assert not exclude_wins("events.debug")
    assert exclude_wins("events.debug.more")  # only the full name is excluded

    only_exclude = TopicFilter((), ("_.*",))
    assert only_exclude("clicks")
    assert not only_exclude("_schemas")

    # Decisions are cached per topic name and stay the same.
    assert [exclude_wins("events.debug") for _ in range(3)] == [False] * 3


def test_topic_filter_cache_is_bounded() -> None:
    accept = TopicFilter((), ("x.*",))
    for n in range(100_100):
        accept(f"t{n}")
    assert len(accept._decided) <= 100_000
    assert accept("t100099")
