"""Runtime applications run as processes, and the harnesses that start, stop, kill and check
them: shared by the test suite (``tests/``) and the benchmarks (``bench/``), so neither imports
the other's code. Not shipped in the wheel."""
