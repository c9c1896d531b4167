"""A faithful simulation of the kube-scheduler's DRA CEL environment and structured allocator.

Used by ``dra-gpu explain`` (``dra_driver.cli.explain``) to say which devices a pod's claims
would get, or why none: :mod:`dra_driver.schedsim.cel` re-implements the scheduler's DRA CEL
environment (cel-go's types, errors and optimizations on cel-python's grammar) and
:mod:`dra_driver.schedsim.allocator` the structured allocator's rules (pools and generations,
counters, consumable capacity, taints, constraints, backtracking). Both are checked against the
scheduler's Go code by ``tests/differential``. Pure: no I/O. The driver's core
(``dra_driver.core``) never imports this package; it uses the core (quantities) only.
"""
