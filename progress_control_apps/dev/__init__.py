"""Development tools apart from the core: the embedded Kafka broker (:mod:`~.broker`), the jar
cache it and Spark's Kafka connector are fetched into (:mod:`~.jars`, :mod:`~.cache`, ``poms/``).
Used by the demo, the tests, the benches and the CLI; the core never imports them."""
