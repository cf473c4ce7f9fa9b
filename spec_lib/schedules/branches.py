"""Branch policies of the partial-branch schedule (:mod:`spec_lib.schedules.partial`; seed 000,
Sec. 5's open design): which verification outcomes k get a Quadratic-SS branch in the next call.

* ``"full"``: S = {m}, the outcome "the whole draft is accepted";
* ``"first:s"``: S = {0, ..., s-1} (clipped to 0..m);
* ``"likely:s"``: the s most likely outcomes under the stored acceptance estimates alpha_i:
  P(h = k) = alpha_1..alpha_k (1 - alpha_{k+1}), P(h = m) = alpha_1..alpha_m.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import torch


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


#: rules of :class:`BranchPolicy`
BRANCH_RULES = ("full", "first", "likely")


@dataclass(frozen=True)
class BranchPolicy:
    """Which verification outcomes k get a branch in the next call.

    Attributes:
        rule: ``"full"`` (S = {m}), ``"first"`` (S = {0..size-1}) or ``"likely"`` (the
            ``size`` most likely outcomes under the acceptance estimates).
        size: |S| for ``first`` and ``likely`` (an int >= 1); 1 for ``full``.
    """

    rule: str = "full"
    size: int = 1

    def __post_init__(self) -> None:
        if self.rule not in BRANCH_RULES:
            raise ValueError(f"branches rule must be one of {list(BRANCH_RULES)}, got {self.rule!r}")
        if not _is_int(self.size) or self.size < 1 or (self.rule == "full" and self.size != 1):
            raise ValueError(f"branches size must be an int >= 1 (1 for 'full'), got {self.size!r}")

    @property
    def name(self) -> str:
        return "full" if self.rule == "full" else f"{self.rule}:{self.size}"

    @property
    def needs_estimates(self) -> bool:
        return self.rule == "likely"

    def select(self, m: int, alpha: torch.Tensor | None) -> tuple[int, ...]:
        """S for a call verifying m draft tokens; ``alpha`` ``(m,)`` acceptance estimates."""
        if self.rule == "full":
            return (m,)
        if self.rule == "first" or m == 0:
            return tuple(range(min(self.size, m + 1)))
        return tuple(sorted(outcome_probabilities(alpha).topk(min(self.size, m + 1)).indices.tolist()))


def outcome_probabilities(alpha: torch.Tensor) -> torch.Tensor:
    """``(m + 1,)`` P(h = k) if draft token i is accepted independently with probability
    alpha_i: alpha_1..alpha_k (1 - alpha_{k+1}) for k < m, alpha_1..alpha_m for k = m."""
    alpha = alpha.double()
    reach = torch.cat([alpha.new_ones(1), alpha.cumprod(0)])          # P(h >= k), k = 0..m
    stop = torch.cat([1.0 - alpha, alpha.new_ones(1)])                # P(reject at k+1 | h >= k)
    return reach * stop


def branch_policy(branches) -> BranchPolicy:
    """A :class:`BranchPolicy` from itself or a string ``"full"``, ``"first:s"``, ``"likely:s"``."""
    if isinstance(branches, BranchPolicy):
        return branches
    if isinstance(branches, str):
        rule, _, size = branches.partition(":")
        if rule in BRANCH_RULES and (size.isdigit() or (not size and rule == "full")):
            return BranchPolicy(rule, int(size) if size else 1)
    raise ValueError(f"branches must be 'full', 'first:<s>', 'likely:<s>' (s an int >= 1) or a BranchPolicy, "
                     f"got {branches!r}")
