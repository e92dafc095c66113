"""Developer tooling used by the test suite (not shipped in the wheel)."""
