"""The tick engine, shared by the interceptor and the sidecar.

- :mod:`~progress_control.ticks.schedule`: when the n-th tick of an idle period is due;
- :mod:`~progress_control.ticks.activity`: the latest data ack per partition, idle deadlines;
- :mod:`~progress_control.ticks.idle_scheduler`: the thread that wakes at the earliest deadline;
- :mod:`~progress_control.ticks.sender`: the producer of its own that sends control records;
- :mod:`~progress_control.ticks.topic_filter`: which topics get ticks;
- :mod:`~progress_control.ticks.settings`: the ``progress.control.*`` tick settings;
- :mod:`~progress_control.ticks.metrics`: counters and a Prometheus collector;
- :mod:`~progress_control.ticks.activity_report`: the reports an interceptor in report mode ships
  to a sidecar (wire format).
"""
