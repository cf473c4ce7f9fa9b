"""Model adapters: the one seam between schedules and models.

A schedule asks a model for one *call*, described logically (a registered call kind from
:mod:`spec_lib.masks.calls`, the verified prefix, the draft to verify) and gets back target
logits per verify position, drafter logits per draft position, the number of rows
evaluated and the seconds spent in the forward pass.  After verification it tells the
model how many tokens were appended (:meth:`commit`), and the model keeps in its KV cache
exactly the verified prefix except its last token (seed 000, App. D.1 "Cache update").

:class:`DualModeLM` implements this for a transformers causal LM whose AR and diffusion
modes differ only by the attention mask (seed 000, Sec. 2.2 "Shared-weight drafting and
verification"; App. D.1).  :class:`spec_lib.toy.MarkovLM` implements it exactly.

Decode state (KV cache, verified length) is kept **per thread**: one model object can serve
several threads that decode at the same time, each with its own cache (the weights are only
read).  Within one thread, decodes run one after another.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import torch

from . import masks
from .architectures import attention_window, build_qwen3, check_architecture

__all__ = ["CallOutput", "DualModeLM", "SpecModel", "VerifiedCache", "build_qwen3", "protocol_members"]


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


def protocol_members(protocol: type) -> tuple[str, ...]:
    """The attribute and method names a Protocol declares (what duck-typed checks look for)."""
    names = list(getattr(protocol, "__annotations__", {}))
    names += [n for n, v in vars(protocol).items() if callable(v) and not n.startswith("_")]
    return tuple(dict.fromkeys(names))


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

    def steady_last(self, prefix: torch.Tensor) -> torch.Tensor | None:
        """``prefix[-1:]`` when the call has no context rows (every verified token but the last is
        cached: the steady state), else None; :meth:`split_prefix` without slicing the context."""
        if self._pending is not None:
            raise RuntimeError("call() again before commit(): the cache would hold unverified rows")
        return prefix[-1:] if prefix.numel() - 1 <= self.cache_len else None

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


class PerThreadState:
    """Mixin: the decode state returned by ``_new_state()`` is kept per thread."""

    _local_lock = threading.Lock()

    def _thread_local(self) -> threading.local:
        local = self.__dict__.get("_local")
        if local is None:
            with PerThreadState._local_lock:
                local = self.__dict__.setdefault("_local", threading.local())
        return local

    @property
    def state(self):
        """This thread's decode state (created on first use)."""
        local = self._thread_local()
        state = getattr(local, "state", None)
        if state is None:
            state = local.state = self._new_state()
        return state

    def reset(self) -> None:
        """Start a new sequence in this thread."""
        self._thread_local().state = self._new_state()

    def _new_state(self):
        return VerifiedCache()

    def __getstate__(self) -> dict:                   # thread-local state is not pickled
        return {k: v for k, v in self.__dict__.items() if k != "_local"}


class WrapsHFModel:
    """Mixin of the wrappers of one transformers model (``self.hf_model``): its device and dtype."""

    hf_model: torch.nn.Module

    @property
    def device(self) -> torch.device:
        return next(self.hf_model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.hf_model.parameters()).dtype


@dataclass
class _Session:
    """One thread's decode state of a :class:`DualModeLM`."""

    verified: VerifiedCache
    cache: object                                    # transformers DynamicCache
    dtype: torch.dtype
    device: torch.device


def _is_token_id(value, vocab: int) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and 0 <= value < vocab


class DualModeLM(WrapsHFModel, PerThreadState):
    """A shared-weight AR + diffusion model driven by attention masks alone.

    Causal rows predict the next token (shifted); MASK rows in a proposal block predict
    the token at their own position (unshifted), App. D.1.

    Every decode runs the model in eval mode: :meth:`reset` (called at the start of each
    decode) switches a model that was put back into ``train()`` to ``eval()``, so dropout
    never changes an output.

    Args:
        hf_model: a transformers causal LM (one of
            :data:`spec_lib.architectures.TESTED_MODEL_TYPES`; ALiBi models are rejected)
            that accepts a 4D additive ``attention_mask``, explicit ``position_ids`` and a
            ``cache``.
        mask_token_id: id of the MASK token, in ``[0, vocab_size)``.
    """

    def __init__(self, hf_model, mask_token_id: int) -> None:
        config = getattr(hf_model, "config", None)
        if config is None or not callable(hf_model) or not hasattr(hf_model, "parameters"):
            raise TypeError(f"hf_model must be a transformers causal LM, got {type(hf_model).__name__}")
        vocab = int(config.vocab_size)
        if not _is_token_id(mask_token_id, vocab):
            raise ValueError(f"mask_token_id must be an int in [0, {vocab}) (the model's vocabulary), "
                             f"got {mask_token_id!r}")
        check_architecture(config)
        self.hf_model = hf_model.eval()
        self.config = config
        self.mask_token_id = int(mask_token_id)
        self.vocab_size = vocab
        self.max_positions = getattr(config, "max_position_embeddings", None)
        self.attention_window = attention_window(config)
        self._templates: dict[tuple, masks.LayoutTemplate] = {}

    @property
    def cache_len(self) -> int:
        """Number of verified tokens whose K/V are cached (this thread's decode)."""
        return self.state.verified.cache_len

    @property
    def kv_cache(self):
        """This thread's transformers cache (the verified prefix minus its last token)."""
        return self.state.cache

    def _new_state(self) -> _Session:
        from transformers import DynamicCache

        if self.hf_model.training:                       # decoding never runs with dropout
            self.hf_model.eval()
        parameter = next(self.hf_model.parameters())     # read once per sequence, not per call
        return _Session(VerifiedCache(), DynamicCache(config=self.config), parameter.dtype, parameter.device)

    def forward_rows(self, layout: masks.Layout, keep_rows: torch.Tensor | int) -> tuple[torch.Tensor, float]:
        """Run the masked forward for a layout over the cache; logits for ``keep_rows``."""
        session = self.state
        attention_mask = self.attention_mask(layout, session.verified.cache_len)
        start = time.perf_counter()
        with torch.inference_mode():
            out = self.hf_model(input_ids=layout.input_ids[None], position_ids=layout.position_ids[None],
                                attention_mask=attention_mask, cache=session.cache, use_cache=True,
                                logits_to_keep=keep_rows)
            logits = out.logits[0]                                    # (len(keep_rows), V)
            if logits.is_cuda:
                torch.cuda.synchronize(logits.device)
        return logits, time.perf_counter() - start

    def attention_mask(self, layout: masks.Layout, cache_len: int):
        """What the model receives as ``attention_mask`` for ``layout`` over ``cache_len`` cached
        tokens: None for plain causal calls (the model's own mask), else the additive mask of
        the layout's predicate (memoised for steady-state shapes)."""
        if masks.call_kind(layout.kind).plain_causal:
            return None
        if layout.new_rows_mask is not None:                  # memoised (rows, rows) additive block
            return masks.over_cache(layout.new_rows_mask, cache_len)
        return masks.to_additive(layout.visible(), self.state.dtype, cache_len)[None, None]

    def layout(self, kind: str, prefix: torch.Tensor, draft: torch.Tensor, width: int) -> masks.Layout:
        """The layout of a call given this thread's cache (steady-state shapes are memoised).

        A steady-state call (every verified token but the last cached) is built directly from its
        shape's :class:`~spec_lib.masks.LayoutTemplate` (:meth:`~spec_lib.masks.LayoutTemplate.fill`);
        the first call, which processes the prompt, by :func:`spec_lib.masks.build_layout`."""
        session = self.state
        verified = session.verified
        start = verified.cache_len
        last = verified.steady_last(prefix)
        if last is None:                                      # first call: processes the prompt
            context, last = verified.split_prefix(prefix)
            return masks.build_layout(kind, context=context, last=last, draft=draft, width=width,
                                      mask_token_id=self.mask_token_id, start=start)
        n_draft = draft.numel()
        m = n_draft if masks.call_kind(kind).verifies else 0
        key = (kind, m, width, session.dtype, session.device)   # the model may have been cast or moved
        template = self._templates.get(key)
        if template is None:
            template = masks.LayoutTemplate.build(kind, m, width, self.mask_token_id, session.device,
                                                  session.dtype)
            self._templates[key] = template
        return template.fill(last, draft if n_draft == m else draft[:m], start)

    def call(self, kind: str, prefix: torch.Tensor, draft: torch.Tensor, width: int) -> CallOutput:
        """One forward call (see :class:`CallOutput`); K/V of all its rows are pending."""
        layout = self.layout(kind, prefix, draft, width)
        n_target = layout.target_rows.numel()
        logits, seconds = self.forward_rows(layout, layout.keep_rows)
        target = logits[:n_target] if n_target else None
        drafts = (logits[n_target:].reshape(*layout.draft_rows.shape, -1)     # (blocks, n_draft, V)
                  if layout.draft_rows.numel() else None)
        self.state.verified.record(layout.n_context, layout.has_verify, layout.rows)
        return CallOutput(target, drafts, layout.rows, seconds)

    def commit(self, n_appended: int) -> None:
        """Keep the K/V of rows that became verified; discard proposals and rejected rows."""
        session = self.state
        _, drop = session.verified.keep(n_appended)
        if drop:
            session.cache.crop(-drop)          # verify rows come first, so a tail crop suffices
