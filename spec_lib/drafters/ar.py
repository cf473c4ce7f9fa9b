"""The AR drafter baseline (the EAGLE-3 role in seed 001): k tokens in k passes.

Reference: seed 001, Sec. 3.4 "Critical difference from AR drafters": the proposal at depth
i is q(y_{j+i} | x_{1:j}, y_{j+1:j+i-1}), conditioned on the previous unverified drafts.

:class:`ARDrafter` keeps its own KV cache.  A cycle first drops cached positions that the
verifier did not confirm, then feeds the not-yet-cached verified tokens in one pass (which
gives q for the first draft), then one pass per further draft token.  ``k`` passes per
cycle, each counted as a drafter NFE.
"""

from __future__ import annotations

import time

import torch

from .diffusion import ExactDrafter


class ARDrafter:
    """A small causal transformers LM drafting token by token with a KV cache.

    Args:
        hf_model: a transformers causal LM sharing the target's tokenizer.
    """

    kind = "ar"

    def __init__(self, hf_model) -> None:
        config = getattr(hf_model, "config", None)
        if config is None or not callable(hf_model):
            raise TypeError(f"hf_model must be a transformers causal LM, got {type(hf_model).__name__}")
        self.hf_model = hf_model.eval()
        self.config = config
        self.vocab_size = int(config.vocab_size)
        self.max_positions = getattr(config, "max_position_embeddings", None)
        self.reset()

    @property
    def device(self) -> torch.device:
        return next(self.hf_model.parameters()).device

    def reset(self) -> None:
        from transformers import DynamicCache

        self._cache = DynamicCache(config=self.config)
        self._verified = 0                                  # cached prefix tokens (verified)
        self._drafts = torch.empty(0, dtype=torch.long)     # cached draft tokens after them

    def _forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, float]:
        start = time.perf_counter()
        with torch.inference_mode():
            logits = self.hf_model(input_ids=ids[None], cache=self._cache, use_cache=True, logits_to_keep=1).logits[0, -1]
            if logits.is_cuda:
                torch.cuda.synchronize(logits.device)
        return logits, time.perf_counter() - start

    def draft(self, prefix: torch.Tensor, k: int, propose) -> tuple[torch.Tensor, object, list[float], list[int]]:
        """Draft k tokens after ``prefix``.

        Args:
            propose: maps logits ``(1, V)`` to ``(token (1,), Q or None)`` (the schedule's
                temperature / greedy rule, Algorithm 2 line 12).

        Returns:
            ``(draft (k,), Q rows stacked or None, seconds per pass, rows per pass)``.
        """
        # The verified prefix only grows within a decode, so only the cached drafts can be
        # stale: keep those the verifier confirmed (and >= 1 uncached token to feed).
        n = min(self._drafts.numel(), prefix.numel() - 1 - self._verified)
        confirmed = 0
        if n > 0:
            mismatch = self._drafts[:n].to(prefix.device) != prefix[self._verified: self._verified + n]
            confirmed = int(torch.where(mismatch.any(), mismatch.long().argmax(), n))   # first mismatch
        keep = self._verified + confirmed
        if confirmed < self._drafts.numel():
            self._cache.crop(confirmed - self._drafts.numel())    # transformers 5: a negative count
        tokens, qs, seconds, rows = [], [], [], []
        feed = prefix[keep:]
        for _ in range(k):
            logits, sec = self._forward(feed)
            seconds.append(sec)
            rows.append(int(feed.numel()))
            token, q = propose(logits[None])
            tokens.append(token)
            qs.append(q)
            feed = token
        draft = torch.cat(tokens)
        # The cache now holds the prefix and d^(1..k-1) (d^(k) was never fed).
        self._verified, self._drafts = prefix.numel(), draft[:-1]
        q_stored = None if qs[0] is None else torch.cat(qs)
        return draft, q_stored, seconds, rows


class ExactARDrafter(ExactDrafter):
    """Exact AR drafter from a :class:`spec_lib.toy.MarkovLM`: q at depth i is the toy's
    noisy one-step draft given the prefix *and the drafts before it*."""

    kind = "ar"

    def draft(self, prefix: torch.Tensor, k: int, propose):
        tokens, qs, seconds = [], [], []
        stream = prefix
        for _ in range(k):
            start = time.perf_counter()
            logits = self.toy.draft_logprobs(stream, stream.new_empty(0), 1, 1)[0]      # (1, V)
            seconds.append(time.perf_counter() - start)
            token, q = propose(logits)
            tokens.append(token)
            qs.append(q)
            stream = torch.cat([stream, token])
        q_stored = None if qs[0] is None else torch.cat(qs)
        return torch.cat(tokens), q_stored, seconds, [1] * k
