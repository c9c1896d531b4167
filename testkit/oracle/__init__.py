"""The differential oracle: Go's DRA CEL and allocator (celdiff) beside the Python simulator, and the cases both run.

Callers: tests/differential, tests/unit/schedsim, e2e/test_feature_gates.py,
e2e/test_version_matrix.py, bench/selectors.py and testkit/gate_table.py.
"""
