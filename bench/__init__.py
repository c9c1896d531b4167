"""Benchmarks that print figures (run by ``make bench``); never timed tests."""
