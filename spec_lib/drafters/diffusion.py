"""The DEER drafter: a bidirectional masked-diffusion LM that drafts k tokens in one pass.

Reference: seed 001, Sec. 3.4 "Inference" (draft generation, Algorithm 1 line 3): the input
is the verified prefix, a SEP token and k MASK tokens; every position attends to every
other (no causal mask); the logits at the k MASK positions are q_theta(y_{j+i} | x_{1:j}),
i = 1..k, all conditioned only on the prefix (Eq. 5: the denominator of the acceptance
ratio does not depend on the other drafts).

A bidirectional drafter cannot reuse a KV cache across cycles (its prefix states change
as the prefix grows; the paper notes dLLMs lack KV caching, App. F).  To keep a call's cost
bounded we feed only the last ``context`` prefix tokens (a choice of this project; the
cpu drafter is trained on windows of that length).
"""

from __future__ import annotations

import time

import numpy as np
import torch


def _check_id(name: str, value, vocab: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < vocab:
        raise ValueError(f"{name} must be an int in [0, {vocab}) (the drafter's vocabulary), got {value!r}")
    return int(value)


class DiffusionDrafter:
    """One-step block drafter over a transformers model run with a full (bidirectional) mask.

    Args:
        hf_model: a transformers LM accepting a 4D additive ``attention_mask`` (e.g. a
            ``Qwen3ForCausalLM`` trained with :func:`spec_lib.d2a.masked_diffusion_loss`).
        mask_token_id, sep_token_id: ids of MASK and SEP in the shared tokenizer.
        context: the drafter reads at most this many trailing prefix tokens (None: all).
    """

    kind = "diffusion"

    def __init__(self, hf_model, mask_token_id: int, sep_token_id: int, context: int | None = None) -> None:
        config = getattr(hf_model, "config", None)
        if config is None or not callable(hf_model):
            raise TypeError(f"hf_model must be a transformers model, got {type(hf_model).__name__}")
        self.hf_model = hf_model.eval()
        self.vocab_size = int(config.vocab_size)
        self.mask_token_id = _check_id("mask_token_id", mask_token_id, self.vocab_size)
        self.sep_token_id = _check_id("sep_token_id", sep_token_id, self.vocab_size)
        limit = getattr(config, "max_position_embeddings", None)
        if context is not None and (isinstance(context, bool) or not isinstance(context, int) or context < 1):
            raise ValueError(f"context must be None or an int >= 1, got {context!r}")
        self.context = context
        self.max_positions = limit
        self._masks: dict[tuple, torch.Tensor] = {}
        self._tails: dict[tuple, torch.Tensor] = {}

    @property
    def device(self) -> torch.device:
        return next(self.hf_model.parameters()).device

    def reset(self) -> None:
        """Nothing is cached between cycles (bidirectional prefix)."""

    def _tail(self, k: int, device: torch.device) -> torch.Tensor:
        """``[SEP, MASK * k]``, built once per (k, device)."""
        key = (k, device)
        tail = self._tails.get(key)
        if tail is None:
            tail = self._tails[key] = torch.tensor([self.sep_token_id] + [self.mask_token_id] * k, device=device)
        return tail

    def _full_mask(self, rows: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        key = (rows, dtype, device)
        mask = self._masks.get(key)
        if mask is None:                      # every row sees every row: additive zeros
            mask = self._masks[key] = torch.zeros((1, 1, rows, rows), dtype=dtype, device=device)
        return mask

    def propose(self, prefix: torch.Tensor, k: int) -> tuple[torch.Tensor, float, int]:
        """``(logits (k, V), seconds, rows)`` of q_theta(. | prefix) at the k masked positions."""
        if self.context is not None:
            prefix = prefix[-self.context:]
        ids = torch.cat([prefix, self._tail(k, prefix.device)])[None]
        parameter = next(self.hf_model.parameters())
        mask = self._full_mask(ids.shape[1], parameter.dtype, parameter.device)
        start = time.perf_counter()
        with torch.inference_mode():
            logits = self.hf_model(input_ids=ids, attention_mask=mask, use_cache=False, logits_to_keep=k).logits[0]
            if logits.is_cuda:
                torch.cuda.synchronize(logits.device)
        return logits, time.perf_counter() - start, int(ids.shape[1])

    def propose_batch(self, prefixes: list[torch.Tensor], k: int) -> tuple[torch.Tensor, float, int]:
        """``(logits (N, k, V), seconds, rows)`` for several prefixes in one pass: contexts
        are left-padded, each row keeps its own positions 0..n-1 and padding is masked."""
        if self.context is not None:
            prefixes = [p[-self.context:] for p in prefixes]
        device = prefixes[0].device
        n = torch.tensor([p.numel() for p in prefixes], device=device) + 1 + k       # real rows per sequence
        width = int(n.max())
        pad = width - n                                                              # (N,)
        cols = torch.arange(width, device=device)
        real = cols[None, :] >= pad[:, None]
        ids = torch.full((len(prefixes), width), self.mask_token_id, dtype=torch.long, device=device)
        for b, p in enumerate(prefixes):
            ids[b, pad[b]: pad[b] + p.numel()] = p
            ids[b, pad[b] + p.numel()] = self.sep_token_id
        positions = (cols[None, :] - pad[:, None]).clamp(min=0)
        parameter = next(self.hf_model.parameters())
        mask = torch.zeros((len(prefixes), 1, width, width), dtype=parameter.dtype, device=device)
        mask.masked_fill_(~real[:, None, None, :], torch.finfo(parameter.dtype).min)
        start = time.perf_counter()
        with torch.inference_mode():
            logits = self.hf_model(input_ids=ids, position_ids=positions, attention_mask=mask, use_cache=False,
                                   logits_to_keep=k).logits
            if logits.is_cuda:
                torch.cuda.synchronize(logits.device)
        return logits, time.perf_counter() - start, int(ids.numel())


class ExactDrafter:
    """Base of the exact drafters: a :class:`spec_lib.toy.MarkovLM` (usually a different
    chain from the target's) answers the drafting calls in closed form; nothing is cached."""

    kind = ""

    def __init__(self, toy) -> None:
        self.toy = toy
        self.vocab_size = toy.vocab_size
        self.max_positions = None
        self.device = torch.device("cpu")

    def reset(self) -> None:
        pass


class ExactDiffusionDrafter(ExactDrafter):
    """Exact block drafter: row i is the toy chain's (i+1)-step-ahead marginal given the
    prefix, mixed with its ``draft_noise``, so q depends on the prefix only (seed 001, Eq. 5-6)."""

    kind = "diffusion"

    def propose(self, prefix: torch.Tensor, k: int) -> tuple[torch.Tensor, float, int]:
        start = time.perf_counter()
        logits = self.toy.draft_logprobs(prefix, prefix.new_empty(0), 1, k)[0]       # (k, V)
        return logits, time.perf_counter() - start, k + 1
