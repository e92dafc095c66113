"""``python -m progress_control_apps.spark``: see :mod:`progress_control_apps.spark.cli`."""

from progress_control_apps.spark.cli import main

raise SystemExit(main())
