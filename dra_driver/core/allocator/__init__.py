"""A pure simulation of the scheduler's structured allocator, and explanations built on it.

Called by ``dra-gpu explain``. See ``simulate.py`` for the allocator, ``explain.py`` for reports,
``validate.py`` for how input objects are checked and bounded.
"""

from dra_driver.core.allocator.explain import Explanation, RequestExplanation, explain, nodes_of
from dra_driver.core.allocator.model import AllocatedState, Candidate, NodeOutcome, Request, Result
from dra_driver.core.allocator.simulate import AllocationAborted, NodeAllocator, explain_request, gather_pools
from dra_driver.core.allocator.validate import InvalidObject

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
