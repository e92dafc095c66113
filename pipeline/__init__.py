"""The main job: sparse clicks with progress control attached by configuration, sessionized by
the streams runtime and by Spark, with and without control records."""
