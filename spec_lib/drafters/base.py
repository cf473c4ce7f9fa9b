"""The drafter protocol: what the drafter-based schedules need from a separate drafter.

Reference: seed 001 (DEER), Sec. 3.4 "Inference" and "Critical difference from AR drafters":
a drafter proposes k tokens after the verified prefix; the target verifies them with the
same rule as self-speculative decoding (Eq. 5-6), dividing by the distribution Q each draft
token was drawn from.

A drafter turns logits into tokens with the schedule's own ``sample`` rule (greedy argmax,
or a draw from the tempered and optionally truncated distribution, which is stored as Q;
seed 000, Algorithm 2 line 12), so temperature and truncation mean the same thing for
every drafter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

#: logits (n, V) -> (tokens (n,), stored Q or None when greedy)
SampleRule = Callable[[torch.Tensor], tuple[torch.Tensor, object]]


@dataclass
class DraftOutput:
    """One cycle's draft.

    Attributes:
        tokens: ``(k,)`` draft tokens d^(1..k).
        q: the stored distributions they were drawn from (dense ``(k, V)`` or
            :class:`spec_lib.verify.SparseQ`), None when greedy.
        seconds: time of each drafter forward pass (one for a diffusion drafter, k for an
            AR drafter).
        rows: input rows of each pass.
    """

    tokens: torch.Tensor
    q: object
    seconds: list[float]
    rows: list[int]


@runtime_checkable
class Drafter(Protocol):
    """A separate drafter.

    ``kind`` is ``"diffusion"`` (one pass, every q conditioned on the verified prefix only,
    the ``deer`` schedule) or ``"ar"`` (k passes, q at depth i conditioned on the drafts
    before it, the ``ar_draft`` schedule).
    """

    kind: str
    vocab_size: int
    max_positions: int | None
    device: torch.device

    def reset(self) -> None: ...

    def draft(self, prefix: torch.Tensor, k: int, sample: SampleRule) -> DraftOutput: ...

    def positions_needed(self, prefix_len: int, k: int) -> int: ...
