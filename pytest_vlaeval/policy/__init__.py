"""Policies: the contract (a leaf), the built-ins, and the loader that turns a spec into a policy.

``from pytest_vlaeval.policy import EpisodeInfo, Policy`` is the public face of the contract; the
loader lives in ``policy.loading`` and is not imported here, so depending on the contract never
pulls in serving.
"""

from pytest_vlaeval.policy.builtins import BUILTIN_POLICIES, RandomPolicy, ZeroPolicy
from pytest_vlaeval.policy.contract import EpisodeInfo, Policy, as_action_chunk, describe_policy

__all__ = [
    "BUILTIN_POLICIES",
    "EpisodeInfo",
    "Policy",
    "RandomPolicy",
    "ZeroPolicy",
    "as_action_chunk",
    "describe_policy",
]
