"""``python -m spark_jobs``: see :mod:`spark_jobs.cli`."""

from spark_jobs.cli import main

raise SystemExit(main())
