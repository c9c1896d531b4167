"""Observability shared by the apps: structured logging (``logs``) and Prometheus metrics (``metrics``, ``claim_errors``)."""
