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

from ..masks.predicates import padded_visible, to_additive
from .base import DraftLogits, DraftOutput, SampleRule


def check_token_id(name: str, value, vocab: int) -> int:
    """``value`` as an int token id in ``[0, vocab)``, or a ValueError naming ``name``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or not 0 <= value < vocab:
        raise ValueError(f"{name} must be an int in [0, {vocab}) (the drafter's vocabulary), got {value!r}")
    return int(value)


class DiffusionDrafter:
    """One-step block drafter over a transformers model run with a full (bidirectional) mask.

    Args:
        hf_model: a transformers LM accepting a 4D additive ``attention_mask`` (e.g. a
            ``Qwen3ForCausalLM`` trained with :func:`spec_lib.training.d2a.diffusion_loss`).
        mask_token_id, sep_token_id: ids of MASK and SEP in the shared tokenizer.
        context: the drafter reads at most this many trailing prefix tokens (None: all).
    """

    kind = "diffusion"

    def __init__(self, hf_model, mask_token_id: int, sep_token_id: int, context: int | None = None) -> None:
        config = getattr(hf_model, "config", None)
        if config is None or not callable(hf_model) or not hasattr(hf_model, "parameters"):
            raise TypeError(f"hf_model must be a transformers model, got {type(hf_model).__name__}")
        self.hf_model = hf_model.eval()
        self.vocab_size = int(config.vocab_size)
        self.mask_token_id = check_token_id("mask_token_id", mask_token_id, self.vocab_size)
        self.sep_token_id = check_token_id("sep_token_id", sep_token_id, self.vocab_size)
        if context is not None and (isinstance(context, bool) or not isinstance(context, int) or context < 1):
            raise ValueError(f"context must be None or an int >= 1, got {context!r}")
        self.context = context
        self.max_positions = getattr(config, "max_position_embeddings", None)
        self._tails: dict[tuple, torch.Tensor] = {}
        self._masks: dict[tuple, torch.Tensor] = {}

    @property
    def device(self) -> torch.device:
        return next(self.hf_model.parameters()).device

    def reset(self) -> None:
        """Nothing is cached between cycles (bidirectional prefix); decoding runs in eval mode."""
        if self.hf_model.training:
            self.hf_model.eval()

    def positions_needed(self, prefix_len: int, k: int) -> int:
        """Position ids 0..n-1 of ``[prefix tail][SEP][MASK]*k``: n."""
        return min(prefix_len, self.context or prefix_len) + 1 + k

    def _tail(self, k: int, device: torch.device) -> torch.Tensor:
        """``[SEP, MASK * k]``, built once per (k, device)."""
        key = (k, device)
        tail = self._tails.get(key)
        if tail is None:
            tail = self._tails[key] = torch.tensor([self.sep_token_id] + [self.mask_token_id] * k, device=device)
        return tail

    def _full_mask(self, rows: int) -> torch.Tensor:
        """``(1, 1, rows, rows)`` all-visible additive mask, memoised per (rows, dtype, device)."""
        parameter = next(self.hf_model.parameters())
        key = (rows, parameter.dtype, parameter.device)
        mask = self._masks.get(key)
        if mask is None:
            visible = padded_visible(torch.tensor([rows], device=parameter.device), rows)
            mask = self._masks[key] = to_additive(visible, parameter.dtype)[:, None]
        return mask

    def draft_logits(self, prefix: torch.Tensor, k: int) -> DraftLogits:
        """q_theta(. | prefix) at the k masked positions: ``logits`` (k, V), the one pass's
        seconds and rows (seed 001 Sec. 3.4 "Inference").

        Every row sees every row, so no mask is passed (transformers' default for a single
        unpadded sequence is causal, hence the explicit all-visible additive mask).
        """
        if self.context is not None:
            prefix = prefix[-self.context:]
        ids = torch.cat([prefix, self._tail(k, prefix.device)])[None]
        mask = self._full_mask(ids.shape[1])
        start = time.perf_counter()
        with torch.inference_mode():
            logits = self.hf_model(input_ids=ids, attention_mask=mask, use_cache=False, logits_to_keep=k).logits[0]
            if logits.is_cuda:
                torch.cuda.synchronize(logits.device)
        return DraftLogits(logits, [time.perf_counter() - start], [int(ids.shape[1])])

    def draft(self, prefix: torch.Tensor, k: int, sample: SampleRule) -> DraftOutput:
        """One pass: k tokens drawn with ``sample`` from q_theta(. | prefix)."""
        round_ = self.draft_logits(prefix, k)
        tokens, q = sample(round_.logits)
        return DraftOutput(tokens, q, round_.seconds, round_.rows)

    def draft_logits_batch(self, prefixes: list[torch.Tensor], k: int) -> DraftLogits:
        """``logits`` (N, k, V) for several prefixes in one pass (seconds and rows of that pass,
        the padded rows counted): contexts
        are left-padded, each row keeps its own positions 0..n-1 and padding is masked."""
        if self.context is not None:
            prefixes = [p[-self.context:] for p in prefixes]
        device = prefixes[0].device
        lengths = torch.tensor([p.numel() for p in prefixes], device=device) + 1 + k   # real rows per sequence
        padded_len = int(lengths.max())
        pad = padded_len - lengths                                                   # (N,)
        ids = torch.full((len(prefixes), padded_len), self.mask_token_id, dtype=torch.long, device=device)
        for b, p in enumerate(prefixes):
            ids[b, pad[b]: pad[b] + p.numel()] = p
            ids[b, pad[b] + p.numel()] = self.sep_token_id
        positions = (torch.arange(padded_len, device=device)[None, :] - pad[:, None]).clamp(min=0)
        parameter = next(self.hf_model.parameters())
        mask = to_additive(padded_visible(lengths, padded_len, left=True), parameter.dtype)[:, None]
        start = time.perf_counter()
        with torch.inference_mode():
            logits = self.hf_model(input_ids=ids, position_ids=positions, attention_mask=mask, use_cache=False,
                                   logits_to_keep=k).logits
            if logits.is_cuda:
                torch.cuda.synchronize(logits.device)
        return DraftLogits(logits, [time.perf_counter() - start], [int(ids.numel())])
