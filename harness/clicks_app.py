"""An ordinary confluent-kafka application that knows nothing about progress control.

Used by the tests to prove zero-code attach: it imports ``confluent_kafka.Producer`` the usual way,
writes click events to the partitions it is told, then stays alive (serving callbacks) for a while.
Prints one JSON line with what it observed.

    python clicks_app.py BOOTSTRAP TOPIC --partitions 0,1 --records 20 --linger-s 3

``--until-ticks N`` ends the linger early once progress control sent N ticks (a busy machine
can take longer than a fixed linger).
"""

import argparse
import json
import time

from confluent_kafka import Producer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("bootstrap")
    parser.add_argument("topic")
    parser.add_argument("--partitions", default="0")
    parser.add_argument("--records", type=int, default=10)
    parser.add_argument("--linger-s", type=float, default=0.0, help="stay alive after producing")
    parser.add_argument(
        "--until-ticks", type=int, default=None, help="stop lingering once this many ticks went out"
    )
    parser.add_argument("--interval-s", type=float, default=0.0, help="pause between records")
    parser.add_argument("--transactional", action="store_true")
    args = parser.parse_args()

    delivered: list[int] = []
    failed: list[str] = []

    def on_delivery(err, msg):
        if err is None:
            delivered.append(msg.partition())
        else:
            failed.append(str(err))

    config = {"bootstrap.servers": args.bootstrap, "on_delivery": on_delivery, "linger.ms": 5}
    if args.transactional:
        config["transactional.id"] = f"clicks-app-{time.time_ns()}"
    producer = Producer(config)
    partitions = [int(p) for p in args.partitions.split(",")]
    max_produce_s = 0.0
    if args.transactional:
        producer.init_transactions()
        producer.begin_transaction()
    for i in range(args.records):
        started = time.monotonic()
        producer.produce(
            args.topic,
            value=b'{"click": %d}' % i,
            key=b"user-%d" % i,
            partition=partitions[i % len(partitions)],
        )
        max_produce_s = max(max_produce_s, time.monotonic() - started)
        producer.poll(args.interval_s)
    if args.transactional:
        producer.commit_transaction()
    producer.flush(5)
    progress_metrics = getattr(producer, "progress_metrics", lambda: None)
    deadline = time.monotonic() + args.linger_s
    while time.monotonic() < deadline:
        producer.poll(0.1)
        metrics = progress_metrics()
        if args.until_ticks is not None and metrics and metrics.ticks_sent >= args.until_ticks:
            break
    metrics = progress_metrics()
    print(
        json.dumps(
            {
                "producer_class": f"{type(producer).__module__}.{type(producer).__qualname__}",
                "delivered": len(delivered),
                "failed": len(failed),
                "max_produce_s": max_produce_s,
                "ticks_sent": metrics.ticks_sent if metrics else None,
                "ack_recording": metrics.ack_recording if metrics else None,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
