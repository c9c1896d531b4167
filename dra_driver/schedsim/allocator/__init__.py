"""A pure simulation of the scheduler's structured allocator, and explanations built on it.

Called by ``dra-gpu explain``. See ``simulate.py`` for the allocator's search (with ``outcome_cache.py``,
``ledger.py``, ``pools.py``, ``checks.py`` and ``constraints.py``), ``explain.py`` and ``candidates.py`` for reports,
``validate.py`` for how input objects are checked and bounded.
"""

from dra_driver.schedsim.allocator.candidates import explain_request
from dra_driver.schedsim.allocator.explain import Explanation, RequestExplanation, explain, nodes_of
from dra_driver.schedsim.allocator.model import AllocatedState, AllocationAborted, Candidate, NodeOutcome, Request, Result
from dra_driver.schedsim.allocator.pools import gather_pools
from dra_driver.schedsim.allocator.simulate import NodeAllocator
from dra_driver.schedsim.allocator.validate import InvalidObject

__all__ = [
    "AllocatedState",
    "AllocationAborted",
    "Candidate",
    "Explanation",
    "InvalidObject",
    "NodeAllocator",
    "NodeOutcome",
    "Request",
    "RequestExplanation",
    "Result",
    "explain",
    "explain_request",
    "gather_pools",
    "nodes_of",
]
