"""Table-table joins' processors without a broker or a driver: what each kind of join forwards
(Kafka Streams' ``KTableKTable*Join``), the foreign-key join's subscriptions (as Kafka Streams
4.1's ``SubscriptionSendProcessorSupplier``), its wire formats, stale answers, and how each
processor moves progress. Topologies are tests/streams_runtime/topologies/
test_table_joins_driver.py."""

from __future__ import annotations

from typing import Any

import pytest

from streams_runtime.processors import (
    NO_PROGRESS,
    JoinKind,
    Processor,
    ResponseJoinProcessor,
    ResponseMergeProcessor,
    ResponseSerde,
    SourceProcessor,
    SubscriptionJoinProcessor,
    SubscriptionSerde,
    TableReader,
    TableTableJoinProcessor,
)
from streams_runtime.processors.fk_join import (
    Instruction,
    Response,
    Subscription,
    combined_key,
    subscription_instructions,
    value_hash,
)
from streams_runtime.record import Record
from streams_runtime.serdes import String, ValueAndTimestamp
from tests.streams_runtime.processors.memory_context import MemoryContext

S = String()
Ins = Instruction


class _Collect(Processor):
    keeps_order = True

    def __init__(self) -> None:
        super().__init__()
        self.records: list[Record[Any, Any]] = []

    def process(self, record: Record[Any, Any]) -> None:
        self.records.append(record)


def _put(context: MemoryContext, store: str, key: str, value: str, ts: int) -> None:
    raw = ValueAndTimestamp(S.serialize(value) or b"", ts).to_bytes()
    context.kv_store(store).put(S.serialize(key) or b"", raw, ts)


def _side(
    kind: JoinKind, *, send_old: bool = True, input_old: bool = True
) -> tuple[TableTableJoinProcessor, _Collect, MemoryContext]:
    context = MemoryContext()
    join = TableTableJoinProcessor(
        kind,
        TableReader("other", S, S, None),
        lambda a, b: f"{a}|{b}",
        input_old_values=input_old,
        send_old_values=send_old,
    )
    out = _Collect()
    join.children.append(out)
    join.init(context)
    return join, out, context


def _seen(out: _Collect) -> list[tuple[Any, Any, Any, int]]:
    seen = [(r.key, r.value, r.old_value, r.timestamp) for r in out.records]
    out.records.clear()
    return seen


def test_inner_join_forwards_only_when_the_other_side_has_a_row() -> None:
    join, out, context = _side(JoinKind.INNER)
    join.process(Record("k", "a", 10))
    assert _seen(out) == []
    _put(context, "other", "k", "x", 50)
    join.process(Record("k", "b", 20, None, "a"))
    # Stamped with the later of the two; the old value joined with the current row.
    assert _seen(out) == [("k", "b|x", "a|x", 50)]
    join.process(Record("k", None, 60, None, "b"))  # a delete is a delete of the result
    assert _seen(out) == [("k", None, "b|x", 60)]
    join.process(Record("k", None, 70))  # a repeated delete too, as Kafka Streams forwards
    assert _seen(out) == [("k", None, None, 70)]


def test_old_values_only_when_downstream_asked_and_the_input_carries_them() -> None:
    join, out, context = _side(JoinKind.INNER, send_old=False)
    _put(context, "other", "k", "x", 5)
    join.process(Record("k", "b", 20, None, "a"))
    assert _seen(out) == [("k", "b|x", None, 20)]
    join, out, context = _side(JoinKind.LEFT, input_old=False)
    join.process(Record("k", None, 20, None, "a"))  # its input sends no old values
    assert _seen(out) == []


def test_left_join_keeps_this_sides_rows_and_drops_deletes_of_nothing() -> None:
    join, out, _context = _side(JoinKind.LEFT)
    join.process(Record("k", "a", 10))
    assert _seen(out) == [("k", "a|None", None, 10)]
    join.process(Record("k", None, 20, None, "a"))
    assert _seen(out) == [("k", None, "a|None", 20)]
    join.process(Record("k", None, 30))  # neither new nor old: nothing
    assert _seen(out) == []


def test_right_side_of_a_left_join_joins_even_a_delete_with_the_left_row() -> None:
    right, out, context = _side(JoinKind.RIGHT)
    right.process(Record("k", "x", 10))  # no left row: nothing
    assert _seen(out) == []
    _put(context, "other", "k", "a", 5)
    # (This side's value first here: the DSL gives this side the user's joiner reversed.)
    right.process(Record("k", None, 20, None, "x"))
    assert _seen(out) == [("k", "None|a", "x|a", 20)]
    right.process(Record("k", None, 30))  # old value absent: joined with None as well
    assert _seen(out) == [("k", "None|a", "None|a", 30)]


def test_outer_join_keeps_rows_of_either_side() -> None:
    join, out, context = _side(JoinKind.OUTER)
    join.process(Record("k", "a", 10))
    assert _seen(out) == [("k", "a|None", None, 10)]
    join.process(Record("k", None, 11))
    assert _seen(out) == []
    _put(context, "other", "j", "x", 30)
    join.process(Record("j", None, 20))  # a delete of nothing with the other row there
    assert _seen(out) == [("j", "None|x", "None|x", 30)]


def test_a_null_key_is_dropped_and_counted() -> None:
    join, out, context = _side(JoinKind.OUTER)
    join.process(Record(None, "a", 10))
    assert out.records == []
    assert context.dropped == ["null-key"]


# -- foreign-key joins ------------------------------------------------------------------------

C1, C2 = b"c1", b"c2"


@pytest.mark.parametrize(
    ("old", "new", "left", "sends"),
    [
        # inner join (Kafka Streams 4.1)
        (None, C1, False, [(C1, Ins.PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE)]),
        (C1, C1, False, [(C1, Ins.PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE)]),
        (
            C1,
            C2,
            False,
            [(C1, Ins.DELETE_KEY_NO_PROPAGATE), (C2, Ins.PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE)],
        ),
        (C1, "deleted", False, [(C1, Ins.DELETE_KEY_AND_PROPAGATE)]),
        (C1, "null", False, [(C1, Ins.DELETE_KEY_AND_PROPAGATE)]),
        ("null", C1, False, [(C1, Ins.PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE)]),
        ("null", "null", False, []),
        (None, "null", False, []),
        # left join: every update answered, a changed key unsubscribed quietly
        (None, C1, True, [(C1, Ins.PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE)]),
        (
            C1,
            C2,
            True,
            [(C1, Ins.DELETE_KEY_NO_PROPAGATE), (C2, Ins.PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE)],
        ),
        (
            C1,
            "deleted",
            True,
            [(C1, Ins.DELETE_KEY_NO_PROPAGATE), (None, Ins.PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE)],
        ),
        (None, "null", True, [(None, Ins.PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE)]),
        (None, "deleted", True, []),
    ],
)
def test_subscriptions_an_update_sends(
    old: bytes | str | None, new: bytes | str, left: bool, sends: list[tuple[Any, Ins]]
) -> None:
    def key(value: bytes | str | None) -> bytes | None:
        return value if isinstance(value, bytes) else None

    found = subscription_instructions(
        key(old),
        key(new),
        has_old=old is not None,
        has_new=new != "deleted",
        left=left,
    )
    assert found == sends


def test_wire_formats_round_trip() -> None:
    subscriptions = SubscriptionSerde(S)
    sub = Subscription(value_hash(b"v"), Ins.PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE, "k1", 3)
    assert subscriptions.deserialize(subscriptions.serialize(sub)) == sub
    deleted = Subscription(None, Ins.DELETE_KEY_AND_PROPAGATE, "k1")
    assert subscriptions.deserialize(subscriptions.serialize(deleted)) == deleted
    responses = ResponseSerde(S)
    for response in (Response(value_hash(b"v"), "row"), Response(None, None)):
        assert responses.deserialize(responses.serialize(response)) == response
    # A foreign key's subscriptions are the keys with its length and bytes first.
    assert combined_key(b"c1", b"k") == b"\x00\x00\x00\x02c1k"
    assert not combined_key(b"c10", b"k").startswith(combined_key(b"c1", b""))


def _response_join(left: bool) -> tuple[ResponseJoinProcessor, _Collect, MemoryContext]:
    context = MemoryContext()
    join = ResponseJoinProcessor(
        TableReader("orders", S, S, None), S, lambda o, c: f"{o}/{c}", left=left
    )
    out = _Collect()
    join.children.append(out)
    join.init(context)
    return join, out, context


def test_an_answer_to_a_replaced_value_is_stale_and_dropped() -> None:
    # Out of order: the answer to the first value arrives after the row was updated.
    join, out, context = _response_join(left=False)
    _put(context, "orders", "o1", "c1:b", 20)
    join.process(Record("o1", Response(value_hash(b"c1:a"), "alice"), 10))
    assert out.records == []
    assert context.dropped == ["stale-response"]
    join.process(Record("o1", Response(value_hash(b"c1:b"), "alice"), 20))
    assert _seen(out) == [("o1", "c1:b/alice", None, 20)]


def test_answers_without_a_foreign_row() -> None:
    inner, out, context = _response_join(left=False)
    _put(context, "orders", "o1", "c1:a", 20)
    inner.process(Record("o1", Response(value_hash(b"c1:a"), None), 20))
    assert _seen(out) == [("o1", None, None, 20)]  # the inner join's result is unset
    left, out, context = _response_join(left=True)
    _put(context, "orders", "o1", "c1:a", 20)
    left.process(Record("o1", Response(value_hash(b"c1:a"), None), 20))
    assert _seen(out) == [("o1", "c1:a/None", None, 20)]
    left.process(Record("o2", Response(None, None), 30))  # the row was deleted
    assert _seen(out) == [("o2", None, None, 30)]


def test_a_subscription_is_answered_as_its_instruction_says() -> None:
    context = MemoryContext()
    join = SubscriptionJoinProcessor(TableReader("customers", S, S, None))
    out = _Collect()
    join.children.append(out)
    join.init(context)
    digest = value_hash(b"c1:a")
    for instruction in Ins:
        join.process(Record("c1", Subscription(digest, instruction, "o1"), 10))
    # No row: only a delete and "null if none" are answered, with no row.
    assert _seen(out) == [
        ("o1", Response(digest, None), None, 10),
        ("o1", Response(digest, None), None, 10),
    ]
    _put(context, "customers", "c1", "alice", 40)
    join.process(
        Record("c1", Subscription(digest, Ins.PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE, "o1"), 10)
    )
    # Stamped with the later of the two: the row may be newer than the subscription.
    assert _seen(out) == [("o1", Response(digest, "alice"), None, 40)]


def test_progress_of_the_answers_is_the_least_of_their_two_inputs() -> None:
    subscriptions, table = SourceProcessor(S, S), SourceProcessor(S, S)
    answer = SubscriptionJoinProcessor(TableReader("customers", S, S, None))
    merge = ResponseMergeProcessor()
    for parent, child in ((subscriptions, answer), (answer, merge), (table, merge)):
        parent.children.append(child)
        child.parents.append(parent)
    assert merge.control_progress() == NO_PROGRESS
    table.advance(500)  # the table moved on; a subscription from before may still come
    assert merge.control_progress() == NO_PROGRESS
    subscriptions.advance(300)
    assert answer.control_progress() == 300
    assert merge.control_progress() == 300
    assert merge.keeps_order is False  # answers are not in timestamp order


def test_results_data_promises_nothing_but_ticks_pass() -> None:
    responses = SourceProcessor(S, S)
    join, _out, _context = _response_join(left=True)
    responses.children.append(join)
    join.parents.append(responses)
    responses.advance(200)
    assert join.control_progress() == 200
    assert join.keeps_order is False  # answers are out of order on the response topic
