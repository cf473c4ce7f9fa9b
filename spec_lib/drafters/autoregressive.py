"""The AR drafter baseline (the EAGLE-3 role in seed 001): k tokens in k passes.

Reference: seed 001, Sec. 3.4 "Critical difference from AR drafters": the proposal at depth
i is q(y_{j+i} | x_{1:j}, y_{j+1:j+i-1}), conditioned on the previous unverified drafts.

:class:`ARDrafter` keeps its own KV cache (per thread, like :class:`spec_lib.models.DualModeLM`).
A cycle first drops cached positions that the verifier did not confirm, then feeds the
not-yet-cached verified tokens in one pass (which gives q for the first draft), then one
pass per further draft token.  ``k`` passes per cycle, each counted as a drafter NFE.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from ..models import PerThreadState
from .base import DraftOutput, SampleRule


@dataclass
class _ARState:
    cache: object                      # transformers DynamicCache
    verified: int = 0                  # cached prefix tokens (verified)
    drafts: torch.Tensor | None = None  # cached draft tokens after them


class ARDrafter(PerThreadState):
    """A small causal transformers LM drafting token by token with a KV cache.

    Args:
        hf_model: a transformers causal LM sharing the target's tokenizer.
    """

    kind = "ar"

    def __init__(self, hf_model) -> None:
        config = getattr(hf_model, "config", None)
        if config is None or not callable(hf_model) or not hasattr(hf_model, "parameters"):
            raise TypeError(f"hf_model must be a transformers causal LM, got {type(hf_model).__name__}")
        self.hf_model = hf_model.eval()
        self.config = config
        self.vocab_size = int(config.vocab_size)
        self.max_positions = getattr(config, "max_position_embeddings", None)

    @property
    def device(self) -> torch.device:
        return next(self.hf_model.parameters()).device

    def _new_state(self) -> _ARState:
        from transformers import DynamicCache

        if self.hf_model.training:
            self.hf_model.eval()
        return _ARState(DynamicCache(config=self.config), 0, torch.empty(0, dtype=torch.long))

    def positions_needed(self, prefix_len: int, k: int) -> int:
        """The prefix and d^(1..k-1) are fed at positions 0..prefix_len + k - 2."""
        return prefix_len + k - 1

    def _forward(self, state: _ARState, ids: torch.Tensor) -> tuple[torch.Tensor, float]:
        start = time.perf_counter()
        with torch.inference_mode():
            logits = self.hf_model(input_ids=ids[None], cache=state.cache, use_cache=True,
                                   logits_to_keep=1).logits[0, -1]
            if logits.is_cuda:
                torch.cuda.synchronize(logits.device)
        return logits, time.perf_counter() - start

    def draft(self, prefix: torch.Tensor, k: int, sample: SampleRule) -> DraftOutput:
        """Draft k tokens after ``prefix``, each drawn with ``sample`` from q given the
        prefix and the drafts before it (Algorithm 2 line 12 applied pass by pass)."""
        state = self.state
        # The verified prefix only grows within a decode, so only the cached drafts can be
        # stale: keep those the verifier confirmed (and >= 1 uncached token to feed).
        n = min(state.drafts.numel(), prefix.numel() - 1 - state.verified)
        confirmed = 0
        if n > 0:
            mismatch = state.drafts[:n].to(prefix.device) != prefix[state.verified: state.verified + n]
            confirmed = int(torch.where(mismatch.any(), mismatch.long().argmax(), n))   # first mismatch
        keep = state.verified + confirmed
        if confirmed < state.drafts.numel():
            state.cache.crop(confirmed - state.drafts.numel())    # transformers 5: a negative count
        tokens, qs, seconds, rows = [], [], [], []
        feed = prefix[keep:]
        for _ in range(k):
            logits, sec = self._forward(state, feed)
            seconds.append(sec)
            rows.append(int(feed.numel()))
            token, q = sample(logits[None])
            tokens.append(token)
            qs.append(q)
            feed = token
        draft = torch.cat(tokens)
        # The cache now holds the prefix and d^(1..k-1) (d^(k) was never fed).
        state.verified, state.drafts = prefix.numel(), draft[:-1]
        q_stored = None if qs[0] is None else torch.cat(qs)
        return DraftOutput(draft, q_stored, seconds, rows)
