"""Unlikelihood on the model's own repeated n-grams: a lever against greedy loops.

Reference: Welleck et al. 2020, "Neural Text Generation with Unlikelihood Training",
sequence-level unlikelihood: the model continues prompts greedily, and every token of its
continuation that closes an n-gram it already wrote in that continuation is a *negative
candidate*; the loss ``-log(1 - p(candidate | prefix))`` pushes its probability down at the
position that produced it.  The n-gram measure is the one every notebook reports beside
acceptance (:mod:`spec_lib.studies.repetition`), so the lever trains against what is measured.

Used by the self-speculative model's stage 2 (``TrainConfig.distill_unlikelihood``), where
the model's own greedy text is already generated for self-distillation.
"""

from __future__ import annotations

import torch

#: The n of the repeated-n-gram measure (notebook 11: "closes a 4-gram already seen").
NGRAM = 4


def repeated_ngrams(tokens: torch.Tensor, n: int = NGRAM) -> torch.Tensor:
    """``(b, L)`` bool: token i of each row closes an n-gram ``tokens[i-n+1..i]`` that occurred
    earlier in the same row (the first n - 1 tokens never do)."""
    if tokens.dim() != 2:
        raise ValueError(f"tokens must be (rows, length), got shape {tuple(tokens.shape)}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an int >= 1, got {n!r}")
    b, length = tokens.shape
    out = torch.zeros(b, length, dtype=torch.bool, device=tokens.device)
    if length < n:
        return out
    grams = tokens.unfold(1, n, 1)                                             # (b, G, n), G = L - n + 1
    same = (grams[:, :, None, :] == grams[:, None, :, :]).all(-1)               # (b, G, G)
    earlier = torch.ones(same.shape[1:], dtype=torch.bool, device=tokens.device).tril(-1)
    out[:, n - 1:] = (same & earlier).any(-1)
    return out


def unlikelihood(logits: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
    """Mean of ``-log(1 - p(candidate))`` over rows with a candidate (``candidates`` ``>= 0``);
    ``logits`` ``(..., V)``, ``candidates`` ``(...)`` with -100 where none.  Finite at p = 1
    (1 - p is clamped at 1e-5); 0 when no row has a candidate."""
    scored = candidates >= 0
    if not bool(scored.any()):
        return logits.sum() * 0.0
    p = torch.softmax(logits[scored].float(), dim=-1).gather(-1, candidates[scored][:, None])[:, 0]
    return -torch.log((1.0 - p).clamp(min=1e-5)).mean()
