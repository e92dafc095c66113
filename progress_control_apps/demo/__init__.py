"""The main job: sparse clicks with progress control attached by configuration, sessionized by
the streams runtime and by Spark, with and without control records."""

from progress_control.extras import require_extra

require_extra("demo", "the demo", "matplotlib")
