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


@dataclass
class DraftLogits:
    """One block drafter's round before any sampling (:meth:`BlockDrafter.draft_logits`).

    Attributes:
        logits: ``(k, V)`` scores of q at the k draft slots (``(N, k, V)`` for a batch), of the
            last pass run.
        seconds: time of each forward pass of the round.
        rows: input rows of each pass.
        tokens: the drafter's own proposal where its head decides the tokens itself (Domino's
            and DSpark's slot-by-slot loop), else None (the tokens come from ``sample``).
        confidence: DSpark's per-slot confidence, else None.
    """

    logits: torch.Tensor
    seconds: list[float]
    rows: list[int]
    tokens: torch.Tensor | None = None
    confidence: torch.Tensor | None = None


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


@runtime_checkable
class BlockDrafter(Drafter, Protocol):
    """A drafter that proposes its k tokens as one block (kind ``"diffusion"``): DEER's
    diffusion drafter, DFlash / DEdit's block editor, Domino and DSpark.  ``draft_logits``
    gives the round's scores before sampling, with the same return type for every one."""

    def draft_logits(self, prefix: torch.Tensor, k: int) -> DraftLogits: ...
