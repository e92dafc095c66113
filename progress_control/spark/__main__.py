"""``python -m progress_control.spark``: see :mod:`progress_control.spark.cli`."""

from progress_control.spark.cli import main

raise SystemExit(main())
