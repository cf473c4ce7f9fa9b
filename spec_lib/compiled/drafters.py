"""The separate drafters on the compiled fast path: fixed-shape drafting calls.

Seed 001 (DEER) drafts with a separate model; seed 002 measures speed with CUDA-graph
drafting.  :mod:`~spec_lib.compiled.target` puts the target on a static cache and compiles its
steady-state calls; this module does the same for the separate drafters (those of the ``deer``
and ``ar_draft`` schedules, and DFlash / DEdit's) and for DFlash / DEdit's feature target, as
drop-in subclasses (same :class:`~spec_lib.drafters.base.Drafter`
protocol, same tokens and q):

* :class:`StaticDiffusionDrafter` (DEER, seed 001 Sec. 3.4 "Inference"): the drafter reads the
  last ``context`` prefix tokens, so its input ``[prefix tail][SEP][MASK]*k`` has one shape
  per k once the prefix is that long.  Shorter prefixes are left-padded with hidden padding
  keys (each real row keeps its positions 0..n-1, as in
  :meth:`~spec_lib.drafters.diffusion.DiffusionDrafter.draft_logits_batch`) to a bucket: the
  next power of two >= ``bucket``, at most ``context``.  So a decode meets at most
  log2(context / bucket) + 2 shapes per k, each compiled once, and a short prefix does not pay
  for the whole context (``bucket=context``: a single shape).
* :class:`StaticARDrafter` (the AR-drafter baseline, seed 001 Sec. 3.4 "Critical difference
  from AR drafters"): its per-thread KV cache is a ``StaticCache``; dropping the drafts the
  verifier rejected moves the length pointer back (no copy), and the one-row passes (every
  pass after the first of a cycle) run through ``torch.compile``; the first pass of a cycle
  feeds a variable number of verified tokens and runs eagerly over the same cache.

* :class:`StaticFeatureTarget` (the target of DFlash / DEdit, seed 002 Sec. 3): a
  :class:`~spec_lib.drafters.feature_target.FeatureTarget` on the static, optionally compiled
  path of :class:`~spec_lib.compiled.StaticDualModeLM`; the hidden states the drafter is
  conditioned on are a second output of the compiled call, so target and drafter both run
  compiled.
* :class:`StaticBlockEditDrafter` (DFlash / DEdit, seed 002 Sec. 3): the drafter's context K/V
  (the target's verified features, projected per layer) live in per-thread buffers of
  ``max_context`` rows, written at a length pointer; each block pass reads the buffer up to a
  bucket (the next power of two >= ``bucket`` and >= the rows written, at most
  ``max_context``) through an additive mask that hides the rows not yet written, so a pass
  (embeddings, the drafter, the LM head, the argmax) has a few shapes per k and runs through
  ``torch.compile``; the K passes of a round (P1, then K - 1 edits) reuse one graph.

All four keep the time of each shape's first (compiling) call in ``compile_seconds`` and, like
the target, compile each shape in its own region (:class:`spec_lib.compiled.CompiledRegions`:
C++ wrapper on a CPU, guards skipped after a region's first call unless ``skip_guards=False``).
``tests/test_compiled_drafters.py`` checks that greedy outputs of ``deer`` and ``ar_draft`` with
these drafters, and of DFlash / DEdit on either target, equal ``generate`` in float64, that their
draft logits equal the eager drafters', and that the static target records the eager one's
features.
"""

from __future__ import annotations

import threading
import time

import torch

from ..architectures import attention_window
from ..drafters.autoregressive import ARDrafter, _ARState
from ..drafters.base import DraftLogits
from ..drafters.block_edit import BlockEditDrafter
from ..drafters.diffusion import DiffusionDrafter
from ..drafters.feature_target import FeatureTarget
from ..masks.predicates import padded_visible, to_additive
from .target import (CompiledRegions, MaskStrips, StaticDualModeLM, check_compile_args, check_static_args,
                     model_signature, static_mask, static_state)

__all__ = ["StaticDiffusionDrafter", "StaticARDrafter", "StaticBlockEditDrafter", "StaticFeatureTarget"]

#: ``torch.compile`` modes that run CUDA graphs on a GPU, whose outputs live only until the next run
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")


class _CompileTimes:
    """``compile_seconds``: the compiling calls' seconds of each compiled shape (see
    :class:`spec_lib.compiled.CompiledRegions`); empty on the eager path."""

    _regions: CompiledRegions | None

    @property
    def compile_seconds(self) -> dict[tuple, float]:
        return dict(self._regions.compile_seconds) if self._regions is not None else {}


class StaticDiffusionDrafter(_CompileTimes, DiffusionDrafter):
    """:class:`~spec_lib.drafters.diffusion.DiffusionDrafter` with one input shape per k.

    Args:
        hf_model, mask_token_id, sep_token_id: as for ``DiffusionDrafter``.
        context: the prefix tokens the drafter reads (required: it bounds the shapes).
        bucket: shortest padded prefix length (rounded up to a power of two); ``context``
            for a single shape per k.
        compile: run the drafting pass through ``torch.compile``.
        mode: the ``torch.compile`` mode (one of :data:`spec_lib.compiled.COMPILE_MODES`).
        skip_guards: see :class:`spec_lib.compiled.CompiledRegions`.
    """

    def __init__(self, hf_model, mask_token_id: int, sep_token_id: int, context: int, *, bucket: int = 32,
                 compile: bool = False, mode: str | None = None, skip_guards: bool = True) -> None:
        if context is None:
            raise ValueError("context must be an int >= 1 for StaticDiffusionDrafter (it fixes the input shape)")
        super().__init__(hf_model, mask_token_id, sep_token_id, context=context)
        if self.max_positions is not None and context + 2 > self.max_positions:
            raise ValueError(f"context must leave room for SEP and a MASK within max_position_embeddings "
                             f"({self.max_positions}), got {context}")
        if isinstance(bucket, bool) or not isinstance(bucket, int) or bucket < 1:
            raise ValueError(f"bucket must be an int >= 1, got {bucket!r}")
        check_compile_args(compile, mode, skip_guards)
        self.bucket = bucket
        self.compiled, self.mode = compile, mode
        self._regions = CompiledRegions(self._forward, mode, skip_guards) if compile else None
        self._padded: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}
        self._local = threading.local()

    def reset(self) -> None:
        """As the eager drafter's, and (compiled) read the model's signature for this thread's
        calls until the next reset (:func:`spec_lib.compiled.model_signature`)."""
        super().reset()
        if self._regions is not None:
            parameter = next(self.hf_model.parameters())
            self._local.context = (parameter.dtype, parameter.device, model_signature(self.hf_model))

    def _context(self) -> tuple:
        context = getattr(self._local, "context", None)
        if context is None:                           # draft_logits called without a decode's reset
            self.reset()
            context = self._local.context
        return context

    def _forward(self, input_ids, position_ids, attention_mask, k: int):
        return self.hf_model(input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask,
                             use_cache=False, logits_to_keep=k).logits

    def padded_length(self, n: int) -> int:
        """The prefix length ``n`` real tokens are padded to: the next power of two >= ``bucket``
        and >= n, at most ``context``."""
        return min(self.context, 1 << (max(n, self.bucket) - 1).bit_length())

    def buckets(self) -> list[int]:
        """Every padded prefix length a decode can meet (:meth:`padded_length` of 1..``context``)."""
        return sorted({self.padded_length(n) for n in range(1, self.context + 1)})

    def compile_buckets(self, k: int) -> dict[tuple, float]:
        """Compile the drafting pass of ``k`` drafts at every bucket (:meth:`buckets`) before a
        timed run, so that no decode compiles; returns the compile seconds of the shapes
        compiled here (none on the eager path, or when all were compiled already)."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be an int >= 1, got {k!r}")
        before = set(self.compile_seconds)
        if self.compiled:
            device = next(self.hf_model.parameters()).device
            self.reset()
            for n in self.buckets():
                self.draft_logits(torch.zeros(n, dtype=torch.long, device=device), k)
        return {shape: s for shape, s in self.compile_seconds.items() if shape not in before}

    def _positions_and_mask(self, n: int, k: int, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """Position ids and the additive mask of ``n`` real prefix tokens left-padded to their
        bucket (memoised per (n, k, device, dtype): at most ``context`` of them per k)."""
        key = (n, k, device, dtype)
        cached = self._padded.get(key)
        if cached is None:
            width = self.padded_length(n)
            length = width + 1 + k
            pad = width - n
            positions = (torch.arange(length, device=device) - pad).clamp(min=0)[None]
            visible = padded_visible(torch.tensor([n + 1 + k], device=device), length, left=True)
            cached = self._padded[key] = (positions, to_additive(visible, dtype)[:, None])
        return cached

    def draft_logits(self, prefix: torch.Tensor, k: int) -> DraftLogits:
        """As the eager drafter's, on the padded input (``rows`` counts the real rows, as the
        eager drafter does)."""
        prefix = prefix[-self.context:]
        n = prefix.numel()
        width = self.padded_length(n)
        ids = torch.full((1, width + 1 + k), self.mask_token_id, dtype=torch.long, device=prefix.device)
        ids[0, width - n:width] = prefix
        ids[0, width] = self.sep_token_id
        dtype = next(self.hf_model.parameters()).dtype
        positions, mask = self._positions_and_mask(n, k, prefix.device, dtype)
        start = time.perf_counter()
        with torch.inference_mode():
            if self.compiled:
                logits = self._regions(("deer", width, k), self._context(), prefix.device, ids, positions, mask, k)[0]
            else:
                logits = self._forward(ids, positions, mask, k)[0]
            if logits.is_cuda:
                torch.cuda.synchronize(logits.device)
        return DraftLogits(logits, [time.perf_counter() - start], [n + 1 + k])


class StaticARDrafter(_CompileTimes, ARDrafter):
    """:class:`~spec_lib.drafters.autoregressive.ARDrafter` on a per-thread ``StaticCache``.

    Args:
        hf_model: as for ``ARDrafter`` (full-attention models only).
        max_cache_len: K/V slots per thread (prompt + drafts must fit); default the model's
            ``max_position_embeddings``.
        compile: run the one-row passes through ``torch.compile``.
        mode: the ``torch.compile`` mode (one of :data:`spec_lib.compiled.COMPILE_MODES`).
        skip_guards: see :class:`spec_lib.compiled.CompiledRegions`.
    """

    def __init__(self, hf_model, *, max_cache_len: int | None = None, compile: bool = False,
                 mode: str | None = None, skip_guards: bool = True) -> None:
        super().__init__(hf_model)
        window = attention_window(self.config)
        if window is not None:
            raise ValueError(f"StaticARDrafter supports full-attention models only; this {self.config.model_type} "
                             f"model has a sliding window of {window}")
        self.max_cache_len = check_static_args(self.max_positions, max_cache_len, compile, mode,
                                               skip_guards=skip_guards)
        self.compiled, self.mode = compile, mode
        self._regions = CompiledRegions(self._call, mode, skip_guards) if compile else None
        self._strips = MaskStrips(self.max_cache_len)
        self._one_row: dict[tuple, torch.Tensor] = {}

    def _new_state(self) -> _ARState:
        _, cache = static_state(self)
        return _ARState(cache, 0, torch.empty(0, dtype=torch.long))

    def _call(self, input_ids, position_ids, attention_mask, cache):
        return self.hf_model(input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask,
                             cache=cache, use_cache=True, logits_to_keep=1).logits

    def _forward(self, state: _ARState, ids: torch.Tensor) -> tuple[torch.Tensor, float]:
        """One pass of ``ids`` over the cache (rows causal among themselves)."""
        cache_len = state.cache.get_seq_length()
        cache_len = int(cache_len) if isinstance(cache_len, int) else int(cache_len.item())
        rows = ids.numel()
        if cache_len + rows > self.max_cache_len:
            raise ValueError(f"max_cache_len={self.max_cache_len} is too small: this pass needs {cache_len + rows} "
                             f"slots ({cache_len} cached + {rows} rows); build the drafter with a larger max_cache_len")
        dtype = next(self.hf_model.parameters()).dtype
        if rows == 1:
            key = (ids.device, dtype)
            block = self._one_row.get(key)
            if block is None:
                block = self._one_row[key] = torch.zeros(1, 1, dtype=dtype, device=ids.device)
            mask = self._strips.mask(block, cache_len)
        else:
            block = to_additive(torch.ones(rows, rows, dtype=torch.bool, device=ids.device).tril(), dtype)
            mask = static_mask(block, cache_len, self.max_cache_len)
        positions = torch.arange(cache_len, cache_len + rows, device=ids.device)[None]
        steady = self.compiled and rows == 1
        args = (ids[None], positions, mask, state.cache)
        start = time.perf_counter()
        with torch.inference_mode():
            if steady:
                logits = self._regions(("ar_draft", 1), self._thread_local().context, ids.device, *args)[0, -1]
            else:
                logits = self._call(*args)[0, -1]
            if logits.is_cuda:
                torch.cuda.synchronize(logits.device)
        return logits, time.perf_counter() - start


class _StaticEditState:
    """One thread's round state: the context K/V buffers and the rows written so far."""

    def __init__(self, kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.kv = kv
        self.rows = 0
        self.passes: list[int] = []


class StaticBlockEditDrafter(_CompileTimes, BlockEditDrafter):
    """:class:`~spec_lib.drafters.block_edit.BlockEditDrafter` with static context buffers.

    Args:
        target, network, passes, early_exit, stochastic: as for ``BlockEditDrafter``.
        max_context: context rows per thread (the verified prefix must fit); default the
            network's ``max_position_embeddings``.
        bucket: shortest context slice a pass reads (rounded up to a power of two);
            ``max_context`` for a single shape per k.
        compile: run each block pass through ``torch.compile``.
        mode: the ``torch.compile`` mode (one of :data:`spec_lib.compiled.COMPILE_MODES`).
        skip_guards: see :class:`spec_lib.compiled.CompiledRegions`.
    """

    def __init__(self, target, network, *, passes: int = 1, early_exit: bool = False, stochastic: str = "argmax",
                 max_context: int | None = None, bucket: int = 32, compile: bool = False,
                 mode: str | None = None, skip_guards: bool = True) -> None:
        super().__init__(target, network, passes=passes, early_exit=early_exit, stochastic=stochastic)
        self.max_context = check_static_args(self.max_positions, max_context, compile, mode, name="max_context",
                                             skip_guards=skip_guards)
        if isinstance(bucket, bool) or not isinstance(bucket, int) or bucket < 1:
            raise ValueError(f"bucket must be an int >= 1, got {bucket!r}")
        self.bucket = bucket
        self.compiled, self.mode = compile, mode
        self._regions = CompiledRegions(self._pass, mode, skip_guards) if compile else None

    def _new_state(self) -> _StaticEditState:
        if self.network.training:
            self.network.eval()
        parameter = next(self.network.parameters())
        local = self._thread_local()
        key = (parameter.dtype, parameter.device)
        kv = getattr(local, "context_buffers", None)
        if kv is None or getattr(local, "context_key", None) != key:
            config = self.network.config
            heads = config.num_key_value_heads or config.num_attention_heads
            shape = (1, heads, self.max_context, self.network.layers[0].self_attn.head_dim)
            kv = [(parameter.new_zeros(shape), parameter.new_zeros(shape)) for _ in self.network.layers]
            local.context_buffers, local.context_key = kv, key
        if self._regions is not None:
            local.context = key + (model_signature(self.network, self.target.lm),)
        return _StaticEditState(kv)

    def _extend_context(self, state: _StaticEditState, anchor_position: int) -> None:
        """Write the target's newly verified features, projected per layer, at the pointer."""
        new = self.target.features_from(state.rows)
        n = new.shape[0]
        if state.rows + n > self.max_context:
            raise ValueError(f"max_context={self.max_context} is too small: the context needs {state.rows + n} "
                             f"rows; build the drafter with a larger max_context")
        if n:
            positions = torch.arange(state.rows, state.rows + n, device=new.device)[None]
            for (k_buf, v_buf), (k, v) in zip(state.kv, self.network.context_kv(new[None].to(self.network.dtype),
                                                                              positions), strict=True):
                k_buf[:, :, state.rows:state.rows + n] = k
                v_buf[:, :, state.rows:state.rows + n] = v
            state.rows += n
        allowed = (0, anchor_position) if not state.passes else (anchor_position,)   # round 1: no features yet
        if state.rows not in allowed:
            raise RuntimeError(f"the drafter's context covers {state.rows} rows but the anchor is at position "
                               f"{anchor_position}: decode on the same FeatureTarget the drafter was built with")

    def _round_pass(self, state: _StaticEditState, positions: torch.Tensor, k: int):
        """The round's pass over the static context buffers: each pass reads the buffers up to
        the bucket (the rows not yet written hidden by the mask), compiled once per shape; the
        edit loop itself is the eager drafter's (:meth:`BlockEditDrafter.draft_logits`)."""
        device = positions.device
        dtype = next(self.network.parameters()).dtype
        width = min(self.max_context, 1 << (max(state.rows, self.bucket) - 1).bit_length())
        context_kv = [(k_buf[:, :, :width], v_buf[:, :, :width]) for k_buf, v_buf in state.kv]
        written = (torch.arange(width, device=device) < state.rows).expand(k + 1, -1)
        visible = torch.cat([written, torch.ones(k + 1, k + 1, dtype=torch.bool, device=device)], 1)
        mask = to_additive(visible, dtype)[None, None]
        if not self.compiled:
            return lambda block: self._pass(block, positions, mask, context_kv)
        shape, context = ("dedit", width, k), self._thread_local().context
        return lambda block: self._regions(shape, context, device, block, positions, mask, context_kv)


class StaticFeatureTarget(FeatureTarget, StaticDualModeLM):
    """:class:`~spec_lib.drafters.feature_target.FeatureTarget` on a preallocated ``StaticCache``,
    optionally compiled (:class:`~spec_lib.compiled.StaticDualModeLM`).

    The transformers model is called directly with ``output_hidden_states=True`` (not through
    the eager target's hook), so the outputs of ``layer_ids`` are a second output of each call,
    compiled with it.  After each ``commit`` the features of exactly the rows whose K/V became
    verified are kept, as on the eager target; the drafters read them with ``features_from``.

    Args:
        hf_model, mask_token_id, layer_ids: as for ``FeatureTarget``.
        max_cache_len, compile, mode, skip_guards, cpp_wrapper: as for ``StaticDualModeLM``.
    """

    def __init__(self, hf_model, mask_token_id: int, layer_ids: list[int], *, max_cache_len: int | None = None,
                 compile: bool = False, mode: str | None = None, skip_guards: bool = True,
                 cpp_wrapper: bool = True) -> None:
        StaticDualModeLM.__init__(self, hf_model, mask_token_id, max_cache_len=max_cache_len, compile=compile,
                                  mode=mode, skip_guards=skip_guards, cpp_wrapper=cpp_wrapper)
        # layer_ids checked as the eager target checks them; its hook is not used here
        self.layer_ids = FeatureTarget(hf_model, mask_token_id, layer_ids).layer_ids
        self.lm, self.tap = hf_model, None

    def _forward(self, input_ids, position_ids, attention_mask, cache, keep) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logits, features)``: features ``(rows, feature_size)``, the outputs of ``layer_ids``
        concatenated, for every row of the call (the verified ones are kept at ``commit``)."""
        out = self.hf_model(input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask,
                            cache=cache, use_cache=True, logits_to_keep=keep, output_hidden_states=True)
        return out.logits, torch.cat([out.hidden_states[i + 1][0] for i in self.layer_ids], dim=-1)

    def _received(self, extras: tuple[torch.Tensor, ...]) -> None:
        features = extras[0]
        if self.compiled and self.mode in CUDA_GRAPH_MODES:      # a graph's outputs are overwritten by its next run
            features = features.clone()
        self.state.pending_features = features

    def call(self, kind: str, prefix: torch.Tensor, draft: torch.Tensor, width: int):
        """One forward call; its features were set aside by the call itself (:meth:`_received`),
        not by the eager target's hook."""
        return super(FeatureTarget, self).call(kind, prefix, draft, width)
