"""Observability setup shared by the apps: structured logging."""
