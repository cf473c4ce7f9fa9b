"""A static-cache, optionally compiled execution path behind the same model seam.

:class:`StaticDualModeLM` is a :class:`spec_lib.models.DualModeLM` whose per-thread KV cache is
a transformers ``StaticCache``: K/V for ``max_cache_len`` positions are allocated once (per
thread, reused by every decode of that thread), a call writes its rows at the cache's length
pointer, and the verified-only cache update of seed 000, App. D.1 ("Cache update") moves that
pointer back over the rejected and proposal rows (``StaticCache.crop``: no copy, no
reallocation); the next call overwrites them.  Every call passes an explicit additive mask of
fixed width ``max_cache_len``: the verified prefix visible, the call's own rows by the layout's
predicate (the same masks as the eager path), the stale slots beyond hidden.

With ``compile=True`` the steady-state calls (no context rows: one shape per call kind and
width) run through ``torch.compile`` (inductor; on a GPU ``mode="reduce-overhead"`` adds CUDA
graphs).  A steady call computes the logits of all its rows and the kept ones are gathered
after it, so the rows a call keeps (Packed-SS: |D_{t-1}| + 1 verify rows and W draft rows) do
not multiply the graphs.  The first call of a decode, which processes
the prompt and so has a prompt-dependent shape, runs eagerly over the same cache, so a decode
compiles only its steady-state shapes, once per shape and model.  The time of each shape's
first (compiling) call is kept in :attr:`StaticDualModeLM.compile_seconds`; :func:`warm_up`
pays it before a benchmark.

A call of this 4M-parameter model is overhead-bound on a CPU, so two things that cost
nothing in exactness are on by default (:class:`CompiledRegions`): on a CPU inductor writes
its wrapper in C++ (``cpp_wrapper``: no Python call per kernel), and each shape has its own
``torch.compile`` region holding exactly one graph, so that after its first call dynamo's
guards need not be evaluated (``skip_guard_eval_unsafe``, safe here because the region is
chosen by a key naming everything those guards would distinguish).

The path is exact in the same sense as the eager one: greedy outputs equal
``hf_model.generate`` in float64 (``tests/test_compiled.py``).
"""

from __future__ import annotations

import contextlib
import threading
import time

import torch

from . import masks
from .attention import head_dim
from .models import DualModeLM, VerifiedCache, _Session

__all__ = ["StaticDualModeLM", "warm_up", "COMPILE_MODES", "CompiledRegions", "MaskStrips", "skipped_guards",
           "static_mask", "thread_static_cache"]

#: dynamo's recompile limit while a compiled StaticDualModeLM exists (raised, never lowered).
RECOMPILE_LIMIT = 64

#: ``torch.compile`` modes accepted by :class:`StaticDualModeLM` (None: the default mode).
COMPILE_MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def check_static_args(max_positions, max_cache_len, compile, mode, name: str = "max_cache_len",
                      skip_guards: bool = True) -> int:
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
    check_compile_args(compile, mode, skip_guards)
    return max_cache_len


def check_compile_args(compile, mode, skip_guards: bool = True) -> None:
    """``compile`` and ``skip_guards`` bools and ``mode`` one of :data:`COMPILE_MODES`, or a clear error."""
    if not isinstance(compile, bool):
        raise TypeError(f"compile must be a bool, got {compile!r}")
    if not isinstance(skip_guards, bool):
        raise TypeError(f"skip_guards must be a bool, got {skip_guards!r}")
    if mode not in COMPILE_MODES:
        raise ValueError(f"mode must be one of {COMPILE_MODES}, got {mode!r}")


#: dynamo's cap on the graphs of one function over all its regions (raised, never lowered): every
#: shape of every compiled model in the process is one graph of the same function.
ACCUMULATED_RECOMPILE_LIMIT = 4096


def raise_recompile_limit() -> None:
    """One compiled graph per steady-state shape: a decode with several widths meets more than
    dynamo's default of 8, and a process with many models and widths more than its default
    total of 256, after which it would silently fall back to eager."""
    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, RECOMPILE_LIMIT)
    config.accumulated_recompile_limit = max(config.accumulated_recompile_limit, ACCUMULATED_RECOMPILE_LIMIT)


class _GuardStance:
    """Who runs with dynamo's ``skip_guard_eval_unsafe`` stance, across threads.

    The stance is process-wide, and dynamo refuses to compile a new graph of a function that
    has graphs while it is on.  So calls that skip guards share it (counted; the prior stance
    comes back when the last one ends) and calls that compile wait for them to end, and the
    reverse: a readers-writer lock with the skipping calls as readers.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._skipping = 0
        self._compiling = 0
        self._set = None

    @contextlib.contextmanager
    def skipping(self):
        with self._cond:
            self._cond.wait_for(lambda: self._compiling == 0)
            if self._skipping == 0:
                stance = torch.compiler.set_stance("default", skip_guard_eval_unsafe=True)
                prior = stance.prev
                if prior.stance != "default" or prior.backend is not None or prior.skip_guard_eval_unsafe:
                    stance.__exit__(None, None, None)       # the user's own stance: leave it as it was
                    stance = None
                self._set = stance
            self._skipping += 1
        try:
            yield
        finally:
            with self._cond:
                self._skipping -= 1
                if self._skipping == 0:
                    if self._set is not None:
                        self._set.__exit__(None, None, None)
                        self._set = None
                    self._cond.notify_all()

    @contextlib.contextmanager
    def compiling(self):
        with self._cond:
            self._cond.wait_for(lambda: self._skipping == 0)
            self._compiling += 1
        try:
            yield
        finally:
            with self._cond:
                self._compiling -= 1
                if self._compiling == 0:
                    self._cond.notify_all()


_STANCE = _GuardStance()


def skipped_guards():
    """Context: dynamo's ``skip_guard_eval_unsafe`` stance while the block runs.

    A compiled function then evaluates only the guards that tell its cached graphs apart, so a
    region with one graph runs it with no guard evaluation (about 0.1 ms per call on the cpu
    model).  The stance is process-wide: blocks are counted across threads, the prior stance
    comes back when the last one ends, a stance the user set (e.g.
    ``torch.compiler.set_stance("force_eager")``) is left alone, and :class:`CompiledRegions`'
    compiling calls wait until no such block runs.  Another thread's own ``torch.compile``
    function that must recompile while a block runs gets dynamo's "Recompilation triggered
    with skip_guard_eval_unsafe stance" error: build spec_lib's compiled models with
    ``skip_guards=False`` in such a process.
    """
    return _STANCE.skipping()


class CompiledRegions:
    """``fn`` compiled once per call key, each key in its own ``torch.compile`` region.

    A key names everything that distinguishes one steady-state call from another: the call's
    shapes, dtype and device (the caller's part) and torch's thread count (added here).  With
    ``isolate_recompiles=True`` each region keeps its own graphs, so a region meets one key and
    holds one graph.  With ``skip_guards``, every call after a region's first runs under
    :func:`skipped_guards`: the region's single graph is the one its guards would pick, for
    any call with that key.  What such guards would still check is the model's Python
    structure (attention implementation, layer count, epsilons): after a model's first call
    with a key, change its structure and build a new wrapper (its parameters, read at each
    call, may change freely).

    On a CPU with the default ``mode`` and ``cpp_wrapper`` inductor writes the graph's wrapper
    in C++, which drops inductor's per-kernel Python calls (``cpp_wrapper=False``: its Python
    wrapper, whose generated code is easier to read); a ``mode`` (e.g. ``"reduce-overhead"``,
    CUDA graphs) is passed as is.
    """

    def __init__(self, fn, mode: str | None = None, skip_guards: bool = True, cpp_wrapper: bool = True) -> None:
        check_compile_args(True, mode, skip_guards)
        if not isinstance(cpp_wrapper, bool):
            raise TypeError(f"cpp_wrapper must be a bool, got {cpp_wrapper!r}")
        raise_recompile_limit()
        self.fn, self.mode, self.skip_guards, self.cpp_wrapper = fn, mode, skip_guards, cpp_wrapper
        self._regions: dict[tuple, object] = {}
        self._warm: set[tuple] = set()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Regions created so far (one graph each)."""
        return len(self._regions)

    def __call__(self, key: tuple, device: torch.device, *args):
        key = key + (torch.get_num_threads(),)
        if key in self._warm and self.skip_guards:
            with _STANCE.skipping():
                return self._regions[key](*args)
        with self._lock:
            region = self._regions.get(key)
            if region is None:
                cpp = self.cpp_wrapper and self.mode is None and device.type == "cpu"
                options = {"cpp_wrapper": True} if cpp else None
                region = self._regions[key] = torch.compile(self.fn, dynamic=False, mode=self.mode,
                                                            options=options, isolate_recompiles=True)
        with _STANCE.compiling():
            out = region(*args)
        self._warm.add(key)
        return out


class MaskStrips:
    """Additive masks ``(1, 1, rows, max_cache_len)`` of steady-state calls as slices of one strip.

    For a call's ``(rows, rows)`` block the strip is ``[0 ... 0 | block | -inf ... -inf]`` with
    ``max_cache_len`` columns on either side; the mask over ``cache_len`` cached tokens is its
    ``max_cache_len`` columns from ``max_cache_len - cache_len`` (the cached columns visible,
    the call's rows by the block, every later slot hidden): one copy per call, no rebuild.
    Blocks are the layout templates' memoised ones, kept alive by their owner.
    """

    def __init__(self, max_cache_len: int) -> None:
        self.max_cache_len = max_cache_len
        self._strips: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def mask(self, block: torch.Tensor, cache_len: int) -> torch.Tensor:
        entry = self._strips.get(id(block))
        if entry is None or entry[0] is not block:
            rows, n = block.shape[0], self.max_cache_len
            strip = block.new_full((rows, 2 * n + rows), torch.finfo(block.dtype).min)
            strip[:, :n] = 0
            strip[:, n:n + rows] = block
            entry = self._strips[id(block)] = (block, strip)
        start = self.max_cache_len - cache_len
        return entry[1][:, start:start + self.max_cache_len].contiguous()[None, None]


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
        skip_guards: after a shape's first call, run its graph without evaluating dynamo's
            guards (see :class:`CompiledRegions`; False evaluates them on every call).
        cpp_wrapper: on a CPU with the default ``mode``, inductor's C++ wrapper (False: its
            Python one).
    """

    def __init__(self, hf_model, mask_token_id: int, *, max_cache_len: int | None = None,
                 compile: bool = False, mode: str | None = None, skip_guards: bool = True,
                 cpp_wrapper: bool = True) -> None:
        super().__init__(hf_model, mask_token_id)
        if self.attention_window is not None:
            raise ValueError(f"StaticDualModeLM supports full-attention models only; this "
                             f"{self.config.model_type} model has a sliding window of {self.attention_window}")
        self.max_cache_len = check_static_args(self.max_positions, max_cache_len, compile, mode,
                                               skip_guards=skip_guards)
        self.compiled = compile
        self.mode = mode
        if not isinstance(cpp_wrapper, bool):
            raise TypeError(f"cpp_wrapper must be a bool, got {cpp_wrapper!r}")
        self._regions = CompiledRegions(self._forward, mode, skip_guards, cpp_wrapper) if compile else None
        self._strips = MaskStrips(self.max_cache_len)
        self._keep: dict[tuple, torch.Tensor] = {}
        self._shapes_lock = threading.Lock()
        #: seconds of the first call of each steady-state shape ``(kind, rows)`` (compile + run).
        self.compile_seconds: dict[tuple[str, int], float] = {}

    @property
    def graphs(self) -> int:
        """Compiled graphs so far: one per steady-state call shape, dtype, device and thread count."""
        return len(self._regions) if self._regions is not None else 0

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
        if block is None:                                   # the first call: no template
            return static_mask(masks.to_additive(layout.visible(), self.state.dtype), cache_len, self.max_cache_len)
        return self._strips.mask(block, cache_len)

    def forward_rows(self, layout: masks.Layout, keep_rows: torch.Tensor | int) -> tuple[torch.Tensor, float]:
        session = self.state
        cache_len = session.verified.cache_len
        rows = layout.input_ids.numel()
        if cache_len + rows > self.max_cache_len:
            raise ValueError(f"max_cache_len={self.max_cache_len} is too small: this call needs {cache_len + rows} "
                             f"slots ({cache_len} cached + {rows} rows); build the model with a larger max_cache_len")
        attention_mask = self.attention_mask(layout, cache_len)
        steady = self.compiled and layout.n_context == 0
        if isinstance(keep_rows, int):            # "the last n rows" as indices: no int specialisation
            keep_rows = self._keep_last(rows, keep_rows, layout.input_ids.device)
        shape = (layout.kind, rows)
        first = steady and shape not in self.compile_seconds
        # One graph per (kind, rows): the kept rows of a kind vary (Packed-SS keeps |D_{t-1}| + 1
        # verify rows and W draft rows, so a decode meets W counts), so a steady call computes
        # the logits of every row and the kept ones are gathered after it.
        keep = 0 if steady else keep_rows        # transformers' logits_to_keep=0: every row
        args = (layout.input_ids[None], layout.position_ids[None], attention_mask, session.cache, keep)
        start = time.perf_counter()
        with torch.inference_mode():
            if steady:
                logits = self._regions(shape + (session.dtype, session.device), session.device, *args)[0]
                if keep_rows.numel() < rows:
                    logits = logits[keep_rows]
            else:
                logits = self._forward(*args)[0]
            if logits.is_cuda:
                torch.cuda.synchronize(logits.device)
        seconds = time.perf_counter() - start
        if first:
            with self._shapes_lock:
                self.compile_seconds.setdefault(shape, seconds)
        return logits, seconds

    def _keep_last(self, rows: int, n: int, device) -> torch.Tensor:
        """Indices of the last ``n`` of ``rows`` rows (memoised)."""
        key = (rows, n, device)
        keep = self._keep.get(key)
        if keep is None:
            keep = self._keep[key] = torch.arange(rows - n, rows, device=device)
        return keep


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
