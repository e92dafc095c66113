"""Several runtime processes of one session application, for the progress-promise suite
(``tests/streams_runtime/cluster/test_promise.py``) and its benchmark
(``bench/promise_at_scale.py``); the scale-out suite and benchmark build on it
(:mod:`harness.scale_cluster`, :mod:`harness.group_watch`).

The application (``python -m harness.session_cluster --instance``) is the one of issue 24: clicks
keyed by page on a 6-partition input, ``select_key(user) -> group_by_key -> session count (gap
2 s, grace 1 s) -> suppress(until_window_closes) -> to(out)``, so every upstream task writes every
partition of the internal repartition topic. Every setting comes from PROGRESS_CONTROL_RUNTIME_*
env variables, set by the cluster: its own state dir per instance, consumer session timeout 6 s,
one standby replica, a Prometheus endpoint on a free port.

One module per concern, each imported from where it is defined:

- :mod:`~harness.session_cluster.app`: the application: its topology, its numbers (partitions,
  gap, grace) and running one instance of it in this process;
- :mod:`~harness.session_cluster.clicks`: the input's model and the ground truth: clicks, the
  sessions they make (``sessions_of``), users whose repartition partition is chosen;
- :mod:`~harness.session_cluster.writer`: ``ClickWriter`` writes the input through
  ``interceptor.Producer`` (event time = wall clock, so idle input partitions get ticks after a
  second) from seeded users, pages and gaps, and keeps every record it wrote;
- :mod:`~harness.session_cluster.reader`: reading topics to their end (read_committed), the final
  results among ``out``'s records, and ``OutWatcher``, which notes when each became readable;
- :mod:`~harness.session_cluster.checks`: the checkers: ``compare_sessions`` (results against the
  ground truth) and ``behind_earlier_ticks`` (data written behind a tick on a repartition or
  output partition);
- :mod:`~harness.session_cluster.config`: ``ClusterConfig`` (what every instance shares: its env)
  and the names the other modules share (the guarantee, ``ClusterError``, ...);
- :mod:`~harness.session_cluster.instance`: one runtime process: start it, signal it (SIGKILL,
  SIGSTOP, SIGCONT, SIGTERM), scrape its metrics;
- :mod:`~harness.session_cluster.cluster`: ``SessionCluster`` starts, stops, kills, pauses,
  resumes, replaces and restarts instances, reads the consumer group and the metrics, and waits
  for conditions with deadlines;
- :mod:`~harness.session_cluster.plan`: ``Plan`` (how one scenario runs) and ``RunResult``
  (everything it produced, and what broke the promise);
- :mod:`~harness.session_cluster.scenarios`: ``run_scenario`` runs a scenario end to end (the
  suite's ``SCENARIOS``: kill, pause, rolling restart, a far-behind start; the benchmark's
  ``kill-then-pause`` and ``plain``);
- ``__main__``: an instance's command line (what ``Instance`` starts).
"""
