"""Any-order models behind one seam (seed 000, App. C and D.2): a transformers SetDLM-style
model (:class:`AnyOrderLM`) and an exact toy (:class:`ExactAnyOrderLM`).

The any-order decoders (:mod:`spec_lib.schedules.anyorder`) ask a model for:

  * ``prefill(tokens, positions)``: token rows, causal among themselves, all cached (the
    prompt, or a rebuilt cache); one counted call;
  * ``call(layout)``: the logits of ``layout.keep_rows`` (M rows then R rows) of an
    :class:`~spec_lib.masks.anyorder.AnyOrderLayout` over the cache; every row sees the cache;
  * ``commit(n_rows)``: keep the K/V of the call's first ``n_rows`` rows (N, then the accepted
    O rows, App. D.2 "Cache update"), drop the rest;
  * ``conditional(tokens, positions, query_positions)``: without the cache, the logits at each
    query position of a mask row that sees the given token rows (in that order) and itself:
    ``p(x_j | P, earlier tokens)``, the serial reference of Proposition C.1.

Decode state is per thread, as for :class:`~spec_lib.models.DualModeLM`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from .architectures import check_architecture
from .masks.anyorder import NEW, VERIFY, AnyOrderLayout, any_order_visible
from .masks.predicates import causal_visible, to_additive
from .models import PerThreadState, WrapsHFModel


@dataclass
class _State:
    cache: object
    cache_len: int = 0
    pending: int | None = None               # rows of the last call not yet committed


class AnyOrderLM(WrapsHFModel, PerThreadState):
    """A transformers causal LM trained as an any-order model (token rows and mask rows, SetDLM's
    construction), driven by explicit masks and position ids.

    Args:
        hf_model: a transformers causal LM accepting a 4D additive ``attention_mask``,
            explicit ``position_ids`` and a cache.
        mask_token_id: the MASK id, in ``[0, vocab_size)``.
    """

    def __init__(self, hf_model, mask_token_id: int) -> None:
        config = getattr(hf_model, "config", None)
        if config is None or not callable(hf_model):
            raise TypeError(f"hf_model must be a transformers causal LM, got {type(hf_model).__name__}")
        vocab = int(config.vocab_size)
        if isinstance(mask_token_id, bool) or not isinstance(mask_token_id, int) or not 0 <= mask_token_id < vocab:
            raise ValueError(f"mask_token_id must be an int in [0, {vocab}), got {mask_token_id!r}")
        check_architecture(config)
        self.hf_model = hf_model.eval()
        self.config = config
        self.mask_token_id = mask_token_id
        self.vocab_size = vocab
        self.max_positions = getattr(config, "max_position_embeddings", None)

    @property
    def cache_len(self) -> int:
        return self.state.cache_len

    def _new_state(self) -> _State:
        from transformers import DynamicCache

        if self.hf_model.training:
            self.hf_model.eval()
        return _State(DynamicCache(config=self.config))

    def _forward(self, ids, positions, mask, keep, cache) -> tuple[torch.Tensor, float]:
        """``mask``: the ``(1, 1, rows, cached + rows)`` additive mask."""
        started = time.perf_counter()
        with torch.inference_mode():
            out = self.hf_model(input_ids=ids[None].to(self.device), position_ids=positions[None].to(self.device),
                                attention_mask=mask.to(self.device), cache=cache,
                                use_cache=cache is not None, logits_to_keep=keep)
            logits = out.logits[0]
            if logits.is_cuda:
                torch.cuda.synchronize(logits.device)
        return logits, time.perf_counter() - started

    def prefill(self, tokens: torch.Tensor, positions: torch.Tensor) -> float:
        """Cache token rows (causal in the given order) after the current cache; model seconds."""
        state = self.state
        if state.pending is not None:
            raise RuntimeError("prefill() before commit() of the previous call")
        n = int(tokens.numel())
        if not n:
            return 0.0
        mask = to_additive(causal_visible(n, tokens.device), self.dtype, state.cache_len)[None, None]
        _, seconds = self._forward(tokens, positions, mask, 1, state.cache)
        state.cache_len += n
        return seconds

    def call(self, layout: AnyOrderLayout) -> tuple[torch.Tensor, float]:
        """Logits of ``layout.keep_rows`` over the cache, and model seconds; all rows pending.

        The mask is :meth:`AnyOrderLayout.additive`: built once per layout shape and dtype on
        the model's device, then only the cache columns and the ranks without a draft are
        written per call."""
        state = self.state
        if state.pending is not None:
            raise RuntimeError("call() again before commit(): the cache would hold unverified rows")
        mask = layout.additive(self.dtype, state.cache_len, self.device)
        logits, seconds = self._forward(layout.input_ids, layout.position_ids, mask, layout.keep_rows, state.cache)
        state.pending = layout.rows
        return logits, seconds

    def commit(self, n_rows: int) -> None:
        """Keep the first ``n_rows`` rows of the last call (N and the accepted O rows)."""
        state = self.state
        if state.pending is None:
            raise RuntimeError("commit() without a preceding call()")
        drop = state.pending - n_rows
        if drop:
            state.cache.crop(-drop)
        state.cache_len += n_rows
        state.pending = None

    def crop(self, n_cached: int) -> None:
        """Keep only the first ``n_cached`` cached tokens."""
        state = self.state
        if n_cached < state.cache_len:
            state.cache.crop(n_cached - state.cache_len)
            state.cache_len = n_cached

    def conditional(self, tokens: torch.Tensor, positions: torch.Tensor,
                    query_positions: torch.Tensor) -> torch.Tensor:
        """``(len(query_positions), V)`` logits of mask rows that see ``tokens`` (causal in the
        given order) and themselves; no cache is used or changed."""
        n, q = int(tokens.numel()), int(query_positions.numel())
        region = torch.cat([torch.full((n,), NEW), torch.full((q,), VERIFY)])      # tokens, then M rows
        rank = torch.cat([torch.arange(n), torch.zeros(q, dtype=torch.long)])
        visible = any_order_visible(region, rank, torch.zeros(n + q, dtype=torch.long),
                                    torch.zeros(n + q, dtype=torch.bool))
        ids = torch.cat([tokens.cpu(), torch.full((q,), self.mask_token_id)])
        logits, _ = self._forward(ids, torch.cat([positions.cpu(), query_positions.cpu()]),
                                  to_additive(visible, self.dtype)[None, None], q, None)
        return logits


class ExactAnyOrderLM(PerThreadState):
    """An exact any-order toy: the logits at a query position are a fixed function of the set
    of visible (position, token) pairs (token rows only; MASK rows carry nothing)::

        logits(j | C) = sharpness * bias[j] + coupling * sum_{(i, x) in C} pair[j, i, x]

    in float64 with random tables (seeded), so ties have probability zero.  It implements the
    same seam as :class:`AnyOrderLM` and computes every row from its mask, so a layout whose
    mask is wrong gives wrong logits here too.

    Args:
        vocab_size: V (token 0..V-1; ``mask_token_id`` is V, outside the vocabulary).
        max_positions: positions 0..max_positions-1.
        sharpness, coupling: scales of the position bias and of the context terms (a larger
            coupling makes the drafter, which sees less context, disagree more often).
        copy: added to ``pair[j, j, x, x]``: a row that sees the token at its own position
            copies it, as a trained model would (what a mask that sees its own draft exposes).
        seed: the tables' seed.
    """

    def __init__(self, vocab_size: int = 8, max_positions: int = 96, *, sharpness: float = 2.0,
                 coupling: float = 0.6, copy: float = 4.0, seed: int = 0) -> None:
        if vocab_size < 2 or max_positions < 2:
            raise ValueError(f"vocab_size and max_positions must be >= 2, got {vocab_size}, {max_positions}")
        generator = torch.Generator().manual_seed(seed)
        self.vocab_size = vocab_size
        self.max_positions = max_positions
        self.mask_token_id = vocab_size
        self.bias = sharpness * torch.randn(max_positions, vocab_size, generator=generator, dtype=torch.float64)
        self.pair = coupling * torch.randn(max_positions, max_positions, vocab_size + 1, vocab_size,
                                           generator=generator, dtype=torch.float64)
        self.pair[:, :, vocab_size] = 0.0                     # a MASK row contributes nothing
        same = torch.arange(max_positions)
        self.pair[same, same, :vocab_size] += copy * torch.eye(vocab_size, dtype=torch.float64)   # seeing x at j
        self.device = torch.device("cpu")

    def _new_state(self):
        return {"tokens": [], "positions": [], "pending": None}

    @property
    def cache_len(self) -> int:
        return len(self.state["tokens"])

    def scores(self, query_positions: torch.Tensor, positions: torch.Tensor, tokens: torch.Tensor,
               visible: torch.Tensor) -> torch.Tensor:
        """``(q, V)`` logits for query positions that see the keys where ``visible`` ``(q, k)``."""
        contrib = self.pair[query_positions[:, None], positions[None, :], tokens[None, :]]     # (q, k, V)
        return self.bias[query_positions] + (contrib * visible[..., None]).sum(1)

    def _cached(self):
        s = self.state
        return (torch.tensor(s["tokens"], dtype=torch.long), torch.tensor(s["positions"], dtype=torch.long))

    def prefill(self, tokens: torch.Tensor, positions: torch.Tensor) -> float:
        if self.state["pending"] is not None:
            raise RuntimeError("prefill() before commit() of the previous call")
        self.state["tokens"] += tokens.tolist()
        self.state["positions"] += positions.tolist()
        return 0.0

    def call(self, layout: AnyOrderLayout) -> tuple[torch.Tensor, float]:
        state = self.state
        if state["pending"] is not None:
            raise RuntimeError("call() again before commit(): the cache would hold unverified rows")
        cached_tok, cached_pos = self._cached()
        keep = layout.keep_rows
        visible = torch.cat([torch.ones(keep.numel(), cached_tok.numel(), dtype=torch.bool),
                             layout.visible()[keep]], dim=1)
        tokens = torch.cat([cached_tok, layout.input_ids])
        positions = torch.cat([cached_pos, layout.position_ids])
        state["pending"] = (layout.input_ids.tolist(), layout.position_ids.tolist())
        return self.scores(layout.position_ids[keep], positions, tokens, visible), 0.0

    def commit(self, n_rows: int) -> None:
        state = self.state
        if state["pending"] is None:
            raise RuntimeError("commit() without a preceding call()")
        ids, pos = state["pending"]
        state["tokens"] += ids[:n_rows]
        state["positions"] += pos[:n_rows]
        state["pending"] = None

    def crop(self, n_cached: int) -> None:
        del self.state["tokens"][n_cached:], self.state["positions"][n_cached:]

    def conditional(self, tokens: torch.Tensor, positions: torch.Tensor,
                    query_positions: torch.Tensor) -> torch.Tensor:
        visible = torch.ones(query_positions.numel(), tokens.numel(), dtype=torch.bool)
        return self.scores(query_positions, positions, tokens, visible)
