"""The main job: sparse clicks with progress control attached by configuration, sessionized by
the streams runtime and by Spark, with and without control records."""

try:
    import matplotlib  # noqa: F401 - only to name the extra when it is missing
except ModuleNotFoundError as _missing:  # pragma: no cover - the dev install has it
    raise ModuleNotFoundError(
        f"the demo needs its extra ({_missing.name} is not installed): "
        "pip install 'kafka-progress-control[demo]'",
        name=_missing.name,
    ) from _missing
