"""Benchmarks against the real broker; each prints absolute figures and a ratio to a baseline
measured in the same run. ``./dev bench [NAME ...]`` runs them."""
