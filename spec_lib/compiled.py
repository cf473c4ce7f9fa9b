"""A static-cache, optionally compiled execution path behind the same model seam.

:class:`StaticDualModeLM` is a :class:`spec_lib.models.DualModeLM` whose per-thread KV cache is
a transformers ``StaticCache``: K/V for ``max_cache_len`` positions are allocated once (per
thread, reused by every decode of that thread), a call writes its rows at the cache's length
pointer, and the verified-only cache update of seed 000, App. D.1 ("Cache update") moves that
pointer back over the rejected and proposal rows (``StaticCache.crop``: no copy, no
reallocation); the next call overwrites them.  Every call passes an explicit additive mask of
fixed width ``max_cache_len``: the verified prefix visible, the call's own rows by the layout's
predicate (the same masks as the eager path), the stale slots beyond hidden.

With ``compile=True`` the steady-state calls (no context rows: one shape per call kind, width
and verified-draft length) run through ``torch.compile`` (inductor; on a GPU
``mode="reduce-overhead"`` adds CUDA graphs).  The first call of a decode, which processes
the prompt and so has a prompt-dependent shape, runs eagerly over the same cache, so a decode
compiles only its steady-state shapes, once per shape and process.  The time of each shape's
first (compiling) call is kept in :attr:`StaticDualModeLM.compile_seconds`; :func:`warm_up`
pays it before a benchmark.

The path is exact in the same sense as the eager one: greedy outputs equal
``hf_model.generate`` in float64 (``tests/test_compiled.py``).
"""

from __future__ import annotations

import threading
import time

import torch

from . import masks
from .attention import head_dim
from .models import DualModeLM, VerifiedCache, _Session

__all__ = ["StaticDualModeLM", "warm_up", "COMPILE_MODES", "static_mask", "thread_static_cache"]

#: dynamo's recompile limit while a compiled StaticDualModeLM exists (raised, never lowered).
RECOMPILE_LIMIT = 64

#: ``torch.compile`` modes accepted by :class:`StaticDualModeLM` (None: the default mode).
COMPILE_MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def check_static_args(max_positions, max_cache_len, compile, mode, name: str = "max_cache_len") -> int:
    """Validate the static path's arguments; returns ``max_cache_len`` (default ``max_positions``);
    ``name`` is the argument's name in the caller's signature."""
    if max_cache_len is None:
        if max_positions is None:
            raise ValueError(f"{name} is required: the model's config has no max_position_embeddings")
        max_cache_len = int(max_positions)
    if not isinstance(max_cache_len, int) or isinstance(max_cache_len, bool) or max_cache_len < 2:
        raise ValueError(f"{name} must be an int >= 2, got {max_cache_len!r}")
    if max_positions is not None and max_cache_len > max_positions:
        raise ValueError(f"{name} must be at most the model's max_position_embeddings ({max_positions}), "
                         f"got {max_cache_len}")
    check_compile_args(compile, mode)
    return max_cache_len


def check_compile_args(compile, mode) -> None:
    """``compile`` a bool and ``mode`` one of :data:`COMPILE_MODES`, or a clear error."""
    if not isinstance(compile, bool):
        raise TypeError(f"compile must be a bool, got {compile!r}")
    if mode not in COMPILE_MODES:
        raise ValueError(f"mode must be one of {COMPILE_MODES}, got {mode!r}")


def raise_recompile_limit() -> None:
    """One compiled graph per steady-state shape: a decode with several widths meets more than
    dynamo's default of 8, after which it would silently fall back to eager."""
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)


def thread_static_cache(local, config, max_cache_len: int, parameter: torch.Tensor):
    """This thread's ``StaticCache`` (kept on ``local``): allocated once per (dtype, device) and
    reset, not reallocated, for every later decode."""
    from transformers import StaticCache

    key = (parameter.dtype, parameter.device)
    cache = getattr(local, "static_cache", None)
    if cache is None or getattr(local, "static_key", None) != key:
        cache = StaticCache(config=config, max_cache_len=max_cache_len)
        text = config.get_text_config(decoder=True)
        heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
        cache.early_initialization(1, heads, head_dim(config), parameter.dtype, parameter.device)
        local.static_cache, local.static_key = cache, key
    else:
        cache.reset()
    return cache


def static_mask(block: torch.Tensor, cache_len: int, max_cache_len: int) -> torch.Tensor:
    """``(1, 1, rows, max_cache_len)`` additive mask: the ``cache_len`` cached columns visible, the
    call's own ``rows`` columns by ``block`` (additive ``(rows, rows)``), every later slot hidden."""
    rows = block.shape[0]
    mask = block.new_full((rows, max_cache_len), torch.finfo(block.dtype).min)
    mask[:, :cache_len] = 0
    mask[:, cache_len:cache_len + rows] = block
    return mask[None, None]


class StaticDualModeLM(DualModeLM):
    """:class:`spec_lib.models.DualModeLM` on a preallocated ``StaticCache``, optionally compiled.

    Args:
        hf_model: as for :class:`~spec_lib.models.DualModeLM`; full-attention models only (a
            sliding-window layer keeps a ring buffer that the verified-only pointer update
            cannot rewind).
        mask_token_id: id of the MASK token.
        max_cache_len: K/V slots per thread (prompt + generated tokens + the rows of one call
            must fit); default the model's ``max_position_embeddings``.
        compile: run steady-state calls through ``torch.compile``.
        mode: the ``torch.compile`` mode (one of :data:`COMPILE_MODES`).
    """

    def __init__(self, hf_model, mask_token_id: int, *, max_cache_len: int | None = None,
                 compile: bool = False, mode: str | None = None) -> None:
        super().__init__(hf_model, mask_token_id)
        if self.attention_window is not None:
            raise ValueError(f"StaticDualModeLM supports full-attention models only; this "
                             f"{self.config.model_type} model has a sliding window of {self.attention_window}")
        self.max_cache_len = check_static_args(self.max_positions, max_cache_len, compile, mode)
        self.compiled = compile
        self.mode = mode
        if compile:
            raise_recompile_limit()
        self._step = torch.compile(self._forward, dynamic=False, mode=mode) if compile else self._forward
        self._shapes_lock = threading.Lock()
        #: seconds of the first call of each steady-state shape ``(kind, rows)`` (compile + run).
        self.compile_seconds: dict[tuple[str, int], float] = {}

    # ----- state: one StaticCache per thread, reset (not reallocated) per decode ------------------

    def _new_state(self) -> _Session:
        if self.hf_model.training:
            self.hf_model.eval()
        parameter = next(self.hf_model.parameters())
        cache = thread_static_cache(self._thread_local(), self.config, self.max_cache_len, parameter)
        return _Session(VerifiedCache(), cache, parameter.dtype, parameter.device)

    # ----- the forward call ------------------------------------------------------------------

    def _forward(self, input_ids, position_ids, attention_mask, cache, keep):
        return self.hf_model(input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask,
                             cache=cache, use_cache=True, logits_to_keep=keep).logits

    def attention_mask(self, layout: masks.Layout, cache_len: int) -> torch.Tensor:
        """``(1, 1, rows, max_cache_len)`` additive: the ``cache_len`` cached columns visible, the
        call's own rows by the layout's predicate, every slot after them hidden."""
        block = layout.new_rows_mask
        if block is None:
            block = masks.to_additive(layout.visible(), self.state.dtype)
        return static_mask(block, cache_len, self.max_cache_len)

    def forward_rows(self, layout: masks.Layout, keep_rows: torch.Tensor | int) -> tuple[torch.Tensor, float]:
        session = self.state
        cache_len = session.verified.cache_len
        rows = layout.input_ids.numel()
        if cache_len + rows > self.max_cache_len:
            raise ValueError(f"max_cache_len={self.max_cache_len} is too small: this call needs {cache_len + rows} "
                             f"slots ({cache_len} cached + {rows} rows); build the model with a larger max_cache_len")
        attention_mask = self.attention_mask(layout, cache_len)
        steady = layout.n_context == 0
        step = self._step if steady else self._forward
        if isinstance(keep_rows, int):            # "the last n rows" as indices: no int specialisation
            keep_rows = torch.arange(rows - keep_rows, rows, device=layout.input_ids.device)
        shape = (layout.kind, rows)
        first = self.compiled and steady and shape not in self.compile_seconds
        start = time.perf_counter()
        with torch.inference_mode():
            logits = step(layout.input_ids[None], layout.position_ids[None], attention_mask, session.cache, keep_rows)[0]
            if logits.is_cuda:
                torch.cuda.synchronize(logits.device)
        seconds = time.perf_counter() - start
        if first:
            with self._shapes_lock:
                self.compile_seconds.setdefault(shape, seconds)
        return logits, seconds


def warm_up(model: StaticDualModeLM, prompt: torch.Tensor, *, schedules=("ar", "linear", "quadratic", "packed"),
            widths=(8,), max_new_tokens: int = 32) -> dict[tuple[str, int], float]:
    """Decode ``prompt`` once with every schedule and width, so that every steady-state shape a
    benchmark will meet is compiled before it is timed.  Returns the compile seconds of the
    shapes first met here (``{(call kind, rows): seconds}``)."""
    from .decoding import decode

    if not isinstance(model, StaticDualModeLM):
        raise TypeError(f"model must be a StaticDualModeLM, got {type(model).__name__}")
    before = set(model.compile_seconds)
    for schedule in schedules:
        for width in widths:
            decode(model, prompt, schedule=schedule, width=1 if schedule == "ar" else width,
                   max_new_tokens=max_new_tokens)
    return {k: v for k, v in model.compile_seconds.items() if k not in before}
