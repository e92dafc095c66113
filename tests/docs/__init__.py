"""Examples are tests: the code blocks of README.md and docs/ (docs/contributing.md)."""
