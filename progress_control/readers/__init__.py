"""Reader helpers: make other engines' consumers treat our control records as progress.

One module per engine, each importing that engine only inside itself, so importing this package
needs nothing beyond the core. Docs: ``docs/readers/`` (one page per reader).

- :mod:`progress_control.readers.quix`: Quix Streams 3.x (``Application`` drop-in).
- :mod:`progress_control.readers.kafka_connect`: the sink connectors' transform that drops
  ticks.
- :mod:`progress_control.readers.tick_gate`: the engine-neutral part every helper shares:
  recognise a control record, validate it (:mod:`progress_control.trust`), count it.
"""
