"""Exact drafters for the statistical exactness checks (seed 001, Eq. 5-6; Thm. E.2).

A :class:`spec_lib.toy.MarkovLM` (usually a different chain from the target's) answers the
drafting calls in closed form; nothing is cached.

* :class:`ExactDiffusionDrafter`: row i is the chain's (i+1)-step-ahead marginal given the
  prefix, mixed with its ``draft_noise``, so q depends on the prefix only (DEER's drafter).
* :class:`ExactARDrafter`: q at depth i is the chain's noisy one-step draft given the prefix
  *and the drafts before it* (the AR drafter).
"""

from __future__ import annotations

import time

import torch

from .base import DraftOutput, SampleRule


class ExactDrafter:
    """Base: wraps a toy chain; no position limit, nothing cached."""

    kind = ""

    def __init__(self, toy) -> None:
        self.toy = toy
        self.vocab_size = toy.vocab_size
        self.max_positions = None
        self.device = torch.device("cpu")

    def reset(self) -> None:
        pass

    def positions_needed(self, prefix_len: int, k: int) -> int:
        return prefix_len + k


class ExactDiffusionDrafter(ExactDrafter):
    """Exact block drafter: all k rows in one pass, each conditioned on the prefix only."""

    kind = "diffusion"

    def draft(self, prefix: torch.Tensor, k: int, sample: SampleRule) -> DraftOutput:
        start = time.perf_counter()
        logits = self.toy.draft_logprobs(prefix, prefix.new_empty(0), 1, k)[0]       # (k, V)
        seconds = time.perf_counter() - start
        tokens, q = sample(logits)
        return DraftOutput(tokens, q, [seconds], [k + 1])


class ExactARDrafter(ExactDrafter):
    """Exact AR drafter: k passes, depth i conditioned on the prefix and d^(<i)."""

    kind = "ar"

    def draft(self, prefix: torch.Tensor, k: int, sample: SampleRule) -> DraftOutput:
        tokens, qs, seconds = [], [], []
        stream = prefix
        for _ in range(k):
            start = time.perf_counter()
            logits = self.toy.draft_logprobs(stream, stream.new_empty(0), 1, 1)[0]      # (1, V)
            seconds.append(time.perf_counter() - start)
            token, q = sample(logits)
            tokens.append(token)
            qs.append(q)
            stream = torch.cat([stream, token])
        q_stored = None if qs[0] is None else torch.cat(qs)
        return DraftOutput(torch.cat(tokens), q_stored, seconds, [1] * k)
