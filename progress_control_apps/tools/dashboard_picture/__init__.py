"""A picture of the Helm chart's Grafana dashboard, drawn from a real run.

This is **not Grafana's own rendering**: no Grafana server can be had from the package
registries this project reaches (Debian does not package it, and its Go module is not to be
used), so the dashboard is drawn with matplotlib in Grafana's dark style. Everything it shows
is real, though:

1. A real Prometheus server: ``--prometheus`` when given, else ``prometheus`` on ``PATH``, else
   Debian's ``prometheus`` package, unpacked (``apt-get download`` and ``dpkg -x``: no service
   installed) into ``<cache>/tools/prometheus-deb`` the first time.
2. A real pipeline on a real broker (``--bootstrap-servers``, default ``127.0.0.1:19096``): the
   sidecar (``progress-control sidecar``, broker watch) on two topics; a producer app under the
   interceptor (``progress-control run -- python ...``) writing clicks to four partitions that
   go idle and busy again on a schedule, with one large burst, serving the interceptor's
   collector on its own ``/metrics``; a batch job without the interceptor writing orders twice,
   which only the sidecar ticks; and a streams runtime app (session-window counts of the
   clicks, suppressed until the sessions close) with ``metrics_port`` set, stopped for half a
   minute around the burst (SIGSTOP, then SIGCONT) so that the burst shows as lag.
3. Prometheus scrapes them every 5 s, each target labelled ``namespace`` and ``pod`` as the
   Prometheus Operator's ServiceMonitors label them, and evaluates the chart's own alert rules
   (``templates/prometheusrule.yaml``, rendered by ``helm template``).
4. Each panel's own queries (``helm/progress-control/files/dashboard.json``) go through
   Prometheus' ``query_range`` over the run, Grafana's variables substituted (``$namespace``:
   All), at a 5 s step; the panels are drawn where their ``gridPos`` puts them.
5. It prints, per panel query and per alert rule, how many series came back (and the alerts'
   states), so a query that names a missing metric or label shows as "no data". The run's
   topics (and the runtime's internal ones and group) are deleted at the end.

Run it (about 11 minutes with the default 10-minute pipeline; ``--keep DIR`` keeps the logs,
Prometheus' data and the query results, which ``--replay DIR/results.json`` draws again without
a run)::

    .venv/bin/python -m progress_control_apps.tools.dashboard_picture
    .venv/bin/python -m progress_control_apps.tools.dashboard_picture --minutes 3 --out /tmp/d.png

The modules: ``config`` (what the run is made of), ``prometheus`` (the server and the processes it
watches), ``pipeline`` (topics and the processes of the run), ``apps`` (the producer and runtime
apps, in processes of their own), ``queries`` (the dashboard's queries and alerts over the run),
``render`` (the picture), ``__main__`` (the command).
"""
