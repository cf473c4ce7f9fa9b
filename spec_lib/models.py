"""Model adapters: the one seam between schedules and models.

A schedule asks a model for one *call*, described logically (``kind`` from
:data:`spec_lib.masks.CALL_KINDS`, the verified prefix, the draft to verify) and gets back
target logits per verify position, drafter logits per draft position, the number of rows
evaluated and the seconds spent in the forward pass.  After verification it tells the
model how many tokens were appended (:meth:`commit`), and the model keeps in its KV cache
exactly the verified prefix except its last token (seed 000, App. D.1 "Cache update").

:class:`DualModeLM` implements this for a transformers causal LM whose AR and diffusion
modes differ only by the attention mask (seed 000, Sec. 2.2 "Shared-weight drafting and
verification"; App. D.1).  :class:`spec_lib.toy.MarkovLM` implements it exactly.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from . import masks


@dataclass
class CallOutput:
    """What one model call returns.

    Attributes:
        target_logits: ``(m + 1, V)``: row i-1 scores p_target(. | P, d^(<i)); None for
            a drafting-only call.
        draft_logits: ``(n_blocks, n_draft, V)``: scores of q_draft per drafted position
            (Packed/Linear: one block of W positions after P; Quadratic: block k drafts
            B positions after P, d^(1..k)); None for verification-only calls.
        rows: input rows evaluated (padding and duplicates included, App. D.3).
        seconds: time inside the forward pass (model time; the rest is decoder time).
    """

    target_logits: torch.Tensor | None
    draft_logits: torch.Tensor | None
    rows: int
    seconds: float


@runtime_checkable
class SpecModel(Protocol):
    """What :func:`spec_lib.decode` needs from a model."""

    vocab_size: int
    max_positions: int | None
    device: torch.device

    def reset(self) -> None: ...

    def call(self, kind: str, prefix: torch.Tensor, draft: torch.Tensor, width: int) -> CallOutput: ...

    def commit(self, n_appended: int) -> None: ...


class VerifiedCache:
    """Bookkeeping of which tokens the cache holds: the verified prefix except its last.

    After a call whose layout starts with ``n_context`` context rows, the next
    ``commit(a)`` keeps ``n_context + a`` rows if the call verified (rows of context, last,
    d^(1..a-1)), else only the context rows (App. D.1).
    """

    def __init__(self) -> None:
        self.cache_len = 0
        self._pending: tuple[int, bool, int] | None = None   # (n_context, has_verify, rows)

    def split_prefix(self, prefix: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(context, last): the uncached verified tokens except the last, and the last."""
        if self._pending is not None:
            raise RuntimeError("call() again before commit(): the cache would hold unverified rows")
        return prefix[self.cache_len: -1], prefix[-1:]

    def record(self, n_context: int, has_verify: bool, rows: int) -> None:
        self._pending = (n_context, has_verify, rows)

    def keep(self, n_appended: int) -> tuple[int, int]:
        """Returns (rows to keep, rows to drop) of the pending call and updates cache_len."""
        if self._pending is None:
            raise RuntimeError("commit() without a preceding call()")
        n_context, has_verify, rows = self._pending
        keep = n_context + (n_appended if has_verify else 0)
        self._pending = None
        self.cache_len += keep
        return keep, rows - keep


def build_qwen3(vocab_size: int, *, hidden_size: int = 64, num_layers: int = 2, num_heads: int = 4,
                max_positions: int = 512, seed: int = 0, dtype: torch.dtype = torch.float32):
    """A randomly initialised ``Qwen3ForCausalLM`` built offline from a config (no hub access)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    if hidden_size % num_heads:
        raise ValueError(f"hidden_size must be divisible by num_heads, got {hidden_size} and {num_heads}")
    config = Qwen3Config(vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=3 * hidden_size,
                         num_hidden_layers=num_layers, num_attention_heads=num_heads,
                         num_key_value_heads=max(1, num_heads // 2), head_dim=hidden_size // num_heads,
                         max_position_embeddings=max_positions, tie_word_embeddings=True)
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = Qwen3ForCausalLM(config).to(dtype).eval()
    finally:
        torch.random.set_rng_state(generator_state)
    return model


class DualModeLM:
    """A shared-weight AR + diffusion model driven by attention masks alone.

    Causal rows predict the next token (shifted); MASK rows in a proposal block predict
    the token at their own position (unshifted), App. D.1.

    Args:
        hf_model: a transformers causal LM (e.g. ``Qwen3ForCausalLM``) that accepts a 4D
            additive ``attention_mask``, explicit ``position_ids`` and a ``cache``.
        mask_token_id: id of the MASK token, in ``[0, vocab_size)``.
    """

    def __init__(self, hf_model, mask_token_id: int) -> None:
        config = getattr(hf_model, "config", None)
        if config is None or not callable(hf_model):
            raise TypeError(f"hf_model must be a transformers causal LM, got {type(hf_model).__name__}")
        vocab = int(config.vocab_size)
        if isinstance(mask_token_id, bool) or not isinstance(mask_token_id, int) \
                or not 0 <= mask_token_id < vocab:
            raise ValueError(f"mask_token_id must be an int in [0, {vocab}) (the model's vocabulary), "
                             f"got {mask_token_id!r}")
        self.hf_model = hf_model.eval()
        self.config = config
        self.mask_token_id = mask_token_id
        self.vocab_size = vocab
        self.max_positions = getattr(config, "max_position_embeddings", None)
        self._state = VerifiedCache()
        self._cache = None
        self._where: tuple[torch.dtype, torch.device] | None = None
        self._templates: dict[tuple, masks.LayoutTemplate] = {}

    @property
    def device(self) -> torch.device:
        return next(self.hf_model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.hf_model.parameters()).dtype

    @property
    def cache_len(self) -> int:
        """Number of verified tokens whose K/V are cached."""
        return self._state.cache_len

    def reset(self) -> None:
        """Start a new sequence: empty cache."""
        from transformers import DynamicCache

        self._state = VerifiedCache()
        self._cache = DynamicCache(config=self.config)
        parameter = next(self.hf_model.parameters())     # read once per sequence, not per call
        self._where = (parameter.dtype, parameter.device)

    def forward_rows(self, layout: masks.Layout, keep_rows: torch.Tensor | int) -> tuple[torch.Tensor, float]:
        """Run the masked forward for a layout over the cache; logits for ``keep_rows``."""
        cache_len = self._state.cache_len
        if layout.kind == "ar" or layout.kind == "linear_verify":
            attention_mask = None            # plain causal over the cache: the model's own mask
        elif layout.new_rows_mask is not None:                # memoised (rows, rows) additive block
            attention_mask = masks.extend_over_cache(layout.new_rows_mask, cache_len)
        else:
            attention_mask = masks.additive_mask(layout.visible(), cache_len, self.dtype)
        start = time.perf_counter()
        with torch.inference_mode():
            out = self.hf_model(input_ids=layout.input_ids[None], position_ids=layout.position_ids[None],
                                attention_mask=attention_mask, cache=self._cache, use_cache=True,
                                logits_to_keep=keep_rows)
            logits = out.logits[0]                                    # (len(keep_rows), V)
            if logits.is_cuda:
                torch.cuda.synchronize(logits.device)
        return logits, time.perf_counter() - start

    def layout(self, kind: str, prefix: torch.Tensor, draft: torch.Tensor, width: int) -> masks.Layout:
        """The layout of a call given the current cache (steady-state shapes are memoised)."""
        if self._cache is None:
            self.reset()
        context, last = self._state.split_prefix(prefix)
        start = self._state.cache_len
        if context.numel():                                   # first call: processes the prompt
            return masks.build_layout(kind, context=context, last=last, draft=draft, width=width,
                                      mask_token_id=self.mask_token_id, start=start)
        m = 0 if kind in ("ar", "linear_draft") else draft.numel()
        key = (kind, m, width, *self._where)                    # the model may have been cast or moved
        template = self._templates.get(key)
        if template is None:
            dtype, device = self._where
            template = masks.LayoutTemplate.build(kind, m, width, self.mask_token_id, device, dtype)
            self._templates[key] = template
        return template.fill(last, draft[:m], start)

    def call(self, kind: str, prefix: torch.Tensor, draft: torch.Tensor, width: int) -> CallOutput:
        """One forward call (see :class:`CallOutput`); K/V of all its rows are pending."""
        layout = self.layout(kind, prefix, draft, width)
        n_target = layout.target_rows.numel()
        logits, seconds = self.forward_rows(layout, layout.keep_rows)
        target = logits[:n_target] if n_target else None
        drafts = (logits[n_target:].reshape(*layout.draft_rows.shape, -1)     # (blocks, n_draft, V)
                  if layout.draft_rows.numel() else None)
        self._state.record(layout.n_context, layout.has_verify, layout.rows)
        return CallOutput(target, drafts, layout.rows, seconds)

    def commit(self, n_appended: int) -> None:
        """Keep the K/V of rows that became verified; discard proposals and rejected rows."""
        _, drop = self._state.keep(n_appended)
        if drop:
            self._cache.crop(-drop)          # verify rows come first, so a tail crop suffices
