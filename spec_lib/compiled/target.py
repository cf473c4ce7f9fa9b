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
import weakref

import torch

from .. import masks
from ..attention import head_dim
from ..models import DualModeLM, VerifiedCache, _Session

__all__ = ["StaticDualModeLM", "warm_up", "COMPILE_MODES", "CompiledRegions", "MaskStrips", "skipped_guards",
           "model_signature", "static_mask", "thread_static_cache"]

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

    The stance is process-wide (and dynamo copies it into a process-wide flag at each compiled
    call), and dynamo refuses to compile a new graph while it is on.  So calls that skip guards
    share it (counted; it is set when the first starts and taken back when the last ends) and
    calls that compile wait until none runs, and the reverse: a readers-writer lock with the
    skipping calls as readers and the compiling calls as writers, preferred (a waiting compile
    holds back new skipping blocks, so it is not starved).  Blocks nest: a thread inside one
    (a user's :func:`skipped_guards`) enters the next without waiting, and a compile on that
    thread waits only for the other threads' blocks and runs with the stance taken back
    meanwhile (two such threads compiling at once would wait on each other: the second gets
    an error instead).  The stance is set only over dynamo's plain default and taken back only
    while it is still the one set here, so a stance a user sets before or meanwhile stays.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._skipping = 0                  # open skipping blocks, all threads
        self._compiling = 0                 # compiling calls running
        self._waiting = 0                   # compiling calls waiting for the skipping blocks to end
        self._held = 0                      # threads inside a skipping block that wait to compile
        self._depth = threading.local()     # this thread's open skipping blocks
        self._set = None                    # the set_stance applied here, while it is on

    def _mine(self) -> int:
        return getattr(self._depth, "n", 0)

    def _apply(self) -> None:
        stance = torch.compiler.set_stance("default", skip_guard_eval_unsafe=True)
        prior = stance.prev
        if prior.stance != "default" or prior.backend is not None or prior.skip_guard_eval_unsafe:
            stance.__exit__(None, None, None)           # the user's own stance: leave it as it was
            return
        self._set = stance

    def _take_back(self) -> None:
        stance, self._set = self._set, None
        if stance is not None and _current_stance() is stance.stance:
            stance.__exit__(None, None, None)           # a stance set meanwhile by the user stays

    @contextlib.contextmanager
    def skipping(self):
        mine = self._mine()
        with self._cond:
            if mine == 0:
                self._cond.wait_for(lambda: self._compiling == 0 and self._waiting == 0)
            self._skipping += 1
            self._depth.n = mine + 1
            if self._skipping == 1:
                self._apply()
        try:
            yield
        finally:
            with self._cond:
                self._depth.n = mine
                self._skipping -= 1
                if self._skipping == 0:
                    self._take_back()
                if self._skipping == 0 or self._held:   # a holder waits for the others' blocks only
                    self._cond.notify_all()

    @contextlib.contextmanager
    def compiling(self):
        mine = self._mine()
        with self._cond:
            if mine and self._held:
                raise RuntimeError("two threads inside skipped_guards() meet shapes that are not compiled yet, and "
                                   "each would wait for the other's block to end: warm the shapes up first "
                                   "(spec_lib.compiled.warm_up) or compile outside skipped_guards()")
            self._waiting += 1
            self._held += bool(mine)
            try:
                self._cond.wait_for(lambda: self._skipping == mine)
            finally:
                self._waiting -= 1
                self._held -= bool(mine)
                self._cond.notify_all()
            self._compiling += 1
            if mine:
                self._take_back()                       # this thread's own blocks: off while it compiles
        try:
            yield
        finally:
            with self._cond:
                self._compiling -= 1
                if mine and self._compiling == 0 and self._skipping:
                    self._apply()
                self._cond.notify_all()


def _current_stance():
    """dynamo's current stance object (torch keeps it in ``torch._dynamo.eval_frame._stance``)."""
    return torch._dynamo.eval_frame._stance


_STANCE = _GuardStance()


def skipped_guards():
    """Context: dynamo's ``skip_guard_eval_unsafe`` stance while the block runs.

    A compiled function then evaluates only the guards that tell its cached graphs apart, so a
    region of :class:`CompiledRegions` (one graph) runs it with no guard evaluation (about 0.1
    ms per call on the cpu model).  spec_lib's compiled models hold the stance only over each
    of their own compiled calls; a block around a whole decode saves the per-call set-up too.

    The stance is process-wide, so it reaches every compiled function that runs while any such
    block is open, in any thread: a function of your own whose cached graph no longer fits
    (a changed Python attribute, a new global state) silently runs that stale graph when only
    guards of that kind would differ, and raises dynamo's "Recompilation triggered with
    skip_guard_eval_unsafe stance" error when no graph fits its tensors.  In a process that
    runs other compiled code alongside, build spec_lib's compiled models with
    ``skip_guards=False``.  Blocks are counted across threads and nest; a stance the user set
    (e.g. ``torch.compiler.set_stance("force_eager")``) is left alone, before and during the
    block; :class:`CompiledRegions`' compiling calls wait until the other threads' blocks end
    and new blocks wait for them.  A block must not be open in two threads that both meet a
    shape not compiled yet (the second gets a clear error): warm the shapes up first.
    """
    return _STANCE.skipping()


_SIGNATURES: dict[tuple, int] = {}
_SIGNATURES_LOCK = threading.Lock()


def model_signature(*modules: torch.nn.Module) -> int:
    """A small int naming what dynamo's guards check about ``modules`` beyond a call's shapes:
    each submodule's class and hook counts, every parameter's and buffer's dtype, device and
    shape, the attention implementation.  Equal structures get equal ints (interned, exact).

    A region key that carries it tells apart a model whose parameters were cast in part (e.g.
    one norm to float32: with guards skipped, the float64 graph would run on it and give wrong
    tokens), a peft adapter injected into its modules, a hook added, or another attention
    implementation.  About 80 us on the cpu model: computed once per decode, not per call.
    """
    parts = []
    for module in modules:
        parts.append(getattr(getattr(module, "config", None), "_attn_implementation", None))
        for sub in module.modules():
            parts.append((type(sub), len(sub._forward_hooks), len(sub._forward_pre_hooks)))
            parts += [(t.dtype, t.device, t.shape) for t in sub._parameters.values() if t is not None]
            parts += [(t.dtype, t.device, t.shape) for t in sub._buffers.values() if t is not None]
    parts = tuple(parts)
    with _SIGNATURES_LOCK:
        return _SIGNATURES.setdefault(parts, len(_SIGNATURES))


class CompiledRegions:
    """``fn`` compiled once per call key, each key in its own ``torch.compile`` region.

    A call names its ``shape`` (what distinguishes one steady-state call from another, e.g.
    the call kind and row count) and ``context`` (dtype, device and the model's
    :func:`model_signature`); the region key adds torch's thread count.  With ``isolate_recompiles=True`` each region keeps its own graphs, so a
    region meets one key and holds one graph.  With ``skip_guards``, every call after a
    region's first runs under :func:`skipped_guards`: the region's single graph is the one its
    guards would pick, for any call with that key.  Where dynamo still refuses that graph (a
    call under ``torch.autocast``, parameters of another dtype than the first one's), the call
    falls back to a guarded one that compiles a second graph for the region.

    What guards would check and the key does not name is the rest of the model's Python
    state: a changed epsilon or other attribute, a module swapped for one of the same class.
    After such a change build a new wrapper, or build this one with ``skip_guards=False``.  The
    parameters' values, read at each call, may change freely; their dtypes and the model's
    structure are in the signature, which the compiled models read once per decode (a change
    in the middle of a decode is seen at the next one).

    On a CPU with the default ``mode`` (None or ``"default"``) and ``cpp_wrapper`` inductor
    writes the graph's wrapper in C++, which drops inductor's per-kernel Python calls
    (``cpp_wrapper=False``: its Python wrapper, whose generated code is easier to read); any
    other ``mode`` (e.g. ``"reduce-overhead"``, CUDA graphs) is passed as is.

    :attr:`compile_seconds` holds, per ``shape``, the seconds of its compiling calls (compile
    and first run), summed over the contexts and thread counts it was compiled for.
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
        self.compile_seconds: dict[tuple, float] = {}

    def __len__(self) -> int:
        """Regions created so far (one graph each, two where a guarded fallback recompiled)."""
        return len(self._regions)

    def __call__(self, shape: tuple, context: tuple, device: torch.device, *args):
        key = shape + context + (torch.get_num_threads(),)
        if key in self._warm and self.skip_guards:
            try:
                with _STANCE.skipping():
                    return self._regions[key](*args)
            except RuntimeError as error:                   # raised by the guard lookup, before any work
                if "skip_guard_eval_unsafe" not in str(error):
                    raise
                self._warm.discard(key)
        with self._lock:
            region = self._regions.get(key)
            if region is None:
                cpp = self.cpp_wrapper and self.mode in (None, "default") and device.type == "cpu"
                options = {"cpp_wrapper": True} if cpp else None
                region = self._regions[key] = torch.compile(self.fn, dynamic=False, mode=self.mode,
                                                            options=options, isolate_recompiles=True)
        start = time.perf_counter()
        with _STANCE.compiling():
            out = region(*args)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds = time.perf_counter() - start
        with self._lock:
            if key not in self._warm:
                self.compile_seconds[shape] = self.compile_seconds.get(shape, 0.0) + seconds
                self._warm.add(key)
        return out


class MaskStrips:
    """Additive masks ``(1, 1, rows, max_cache_len)`` of steady-state calls as slices of one strip.

    For a call's ``(rows, rows)`` block the strip is ``[0 ... 0 | block | -inf ... -inf]`` with
    ``max_cache_len`` columns on either side; the mask over ``cache_len`` cached tokens is its
    ``max_cache_len`` columns from ``max_cache_len - cache_len`` (the cached columns visible,
    the call's rows by the block, every later slot hidden): one copy per call, no rebuild.
    Blocks are the layout templates' memoised ones; a strip, ``rows x (2 max_cache_len + rows)``
    values, is dropped when its block is freed (so an id is never met twice while it is held).
    """

    def __init__(self, max_cache_len: int) -> None:
        self.max_cache_len = max_cache_len
        self._strips: dict[int, torch.Tensor] = {}

    def __len__(self) -> int:
        """Strips held (one per live block met)."""
        return len(self._strips)

    def mask(self, block: torch.Tensor, cache_len: int) -> torch.Tensor:
        strip = self._strips.get(id(block))
        if strip is None:
            rows, n = block.shape[0], self.max_cache_len
            strip = block.new_full((rows, 2 * n + rows), torch.finfo(block.dtype).min)
            strip[:, :n] = 0
            strip[:, n:n + rows] = block
            self._strips[id(block)] = strip
            weakref.finalize(block, self._strips.pop, id(block), None)
        start = self.max_cache_len - cache_len
        return strip[:, start:start + self.max_cache_len].contiguous()[None, None]


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


def static_state(owner) -> tuple[torch.Tensor, object]:
    """A decode's start on the static path, for a target or a drafter (``owner``: ``hf_model``,
    ``config``, ``max_cache_len``, ``_regions``, ``_thread_local``): its model in eval mode, this
    thread's ``StaticCache`` (:func:`thread_static_cache`) and, when compiled, the context its
    regions are keyed by (dtype, device, :func:`model_signature`).  Returns ``(a parameter, the cache)``."""
    if owner.hf_model.training:
        owner.hf_model.eval()
    parameter = next(owner.hf_model.parameters())
    local = owner._thread_local()
    cache = thread_static_cache(local, owner.config, owner.max_cache_len, parameter)
    if owner._regions is not None:
        local.context = (parameter.dtype, parameter.device, model_signature(owner.hf_model))
    return parameter, cache


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

    @property
    def compile_seconds(self) -> dict[tuple[str, int], float]:
        """Seconds of the compiling calls of each steady-state shape ``(kind, rows)`` (compile and
        first run, summed over the dtypes, devices and thread counts it was compiled for)."""
        return dict(self._regions.compile_seconds) if self._regions is not None else {}

    @property
    def graphs(self) -> int:
        """Compiled graphs so far: one per steady-state call shape, dtype, device and thread count."""
        return len(self._regions) if self._regions is not None else 0

    # ----- state: one StaticCache per thread, reset (not reallocated) per decode ------------------

    def _new_state(self) -> _Session:
        parameter, cache = static_state(self)
        return _Session(VerifiedCache(), cache, parameter.dtype, parameter.device)

    # ----- the forward call ------------------------------------------------------------------

    def _forward(self, input_ids, position_ids, attention_mask, cache, keep) -> tuple[torch.Tensor, ...]:
        """One forward call (compiled once per steady-state shape): ``(logits,)``, ``(1, rows, V)``.
        A subclass may return further outputs after the logits; :meth:`_received` gets them."""
        return (self.hf_model(input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask,
                              cache=cache, use_cache=True, logits_to_keep=keep).logits,)

    def _received(self, extras: tuple[torch.Tensor, ...]) -> None:
        """The outputs of a call after its logits (:meth:`_forward`): none here."""

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
        # One graph per (kind, rows): the kept rows of a kind vary (Packed-SS keeps |D_{t-1}| + 1
        # verify rows and W draft rows, so a decode meets W counts), so a steady call computes
        # the logits of every row and the kept ones are gathered after it.
        keep = 0 if steady else keep_rows        # transformers' logits_to_keep=0: every row
        args = (layout.input_ids[None], layout.position_ids[None], attention_mask, session.cache, keep)
        start = time.perf_counter()
        with torch.inference_mode():
            if steady:
                outputs = self._regions((layout.kind, rows), self._thread_local().context, session.device, *args)
                logits = outputs[0][0]
                if keep_rows is not self._keep.get((rows, rows, keep_rows.device)):    # not all rows in order
                    logits = logits[keep_rows]
            else:
                outputs = self._forward(*args)
                logits = outputs[0][0]
            self._received(outputs[1:])
            if logits.is_cuda:
                torch.cuda.synchronize(logits.device)
        return logits, time.perf_counter() - start

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
    from ..decoding import decode

    if not isinstance(model, StaticDualModeLM):
        raise TypeError(f"model must be a StaticDualModeLM, got {type(model).__name__}")
    before = set(model.compile_seconds)
    for schedule in schedules:
        for width in widths:
            decode(model, prompt, schedule=schedule, width=1 if schedule == "ar" else width,
                   max_new_tokens=max_new_tokens)
    return {k: v for k, v in model.compile_seconds.items() if k not in before}
