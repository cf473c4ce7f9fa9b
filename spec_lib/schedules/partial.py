"""Partial-branch self-speculative decoding: between Packed-SS and Quadratic-SS.

Seed 000, Sec. 5 ("preparing only a subset of the continuation branches used by
Quadratic-SS could provide intermediate designs between Packed-SS and Quadratic-SS"); the
seed leaves the design open, so this module is the project's reading of that sentence.
Each iteration is one call of the ``partial`` kind (:mod:`spec_lib.masks.partial`):

    1  S = policy(m, acceptance estimates of D_{t-1})           a subset of outcomes 0..m
    2  one call: p_t^(i), i <= m + 1 (verify D_{t-1}, as Packed-SS, Alg. 1-2 lines 3-4);
       q_t(. | P_{t-1}) at W positions (Packed-SS's block); for k in S,
       q_t(. | P_{t-1}, d1..dk) at the W positions after the correction (Quadratic-SS's branch k)
    3  verify with the stored Q_{t-1}; correction or bonus; a = h_t + 1 (Alg. 2 lines 5-11)
    4  h_t in S: D_t ~ branch h_t, W tokens (Quadratic-SS's step, App. E.4);
       else:     D_t = Z_t[a:], sampled from q_t(. | P_{t-1})[a:] (Packed-SS, lines 12-13)

Each draft token is sampled from, and stored with, the distribution of the block it came
from, so rejection sampling stays exact (Theorem 3.3's argument applies to any Q fixed
before verification); greedy outputs equal AR's.  Rows per call: 2B + |S| B.

Branch policies (:class:`BranchPolicy`; ``branches=`` of :func:`decode_partial`):

* ``"full"``: S = {m}, the outcome "the whole draft is accepted", so a fully accepted draft
  never leaves the next iteration with an empty draft;
* ``"first:s"``: S = {0, ..., s-1} (clipped to 0..m);
* ``"likely:s"``: the s outcomes with the largest probability under the stored acceptance
  estimates alpha_i (greedy: the drafter's top probability at draft position i; sampling:
  Q_i(d_i)): P(h = k) = alpha_1..alpha_k (1 - alpha_{k+1}), P(h = m) = alpha_1..alpha_m.
  It reads the estimates on the host: one extra device sync per iteration.

The schedule has its own entry point, :func:`decode_partial`, with :func:`spec_lib.decode`'s
arguments plus ``branches``; its records are :data:`PARTIAL_SCHEDULE` and the call kind
``partial`` of the registry.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, replace

import torch

from .. import masks, verify
from ..masks.partial import PartialCall, partial_call_kind
from ..models import CallOutput, DualModeLM
from ..toy import ExactModel
from . import Schedule
from .state import Decoding
from .validation import MAX_ROWS_PER_CALL, is_int, validate

#: rules of :class:`BranchPolicy`
BRANCH_RULES = ("full", "first", "likely")
#: deliberately wrong variants, for negative controls only: ``branch_argmax`` drafts a
#: branch's tokens by argmax but stores the branch's full distribution as their Q.
PARTIAL_ABLATIONS = (None, "branch_argmax")


@dataclass(frozen=True)
class BranchPolicy:
    """Which verification outcomes k get a branch in the next call.

    Attributes:
        rule: ``"full"`` (S = {m}), ``"first"`` (S = {0..size-1}) or ``"likely"`` (the
            ``size`` most likely outcomes under the acceptance estimates).
        size: |S| for ``first`` and ``likely`` (an int >= 1); 1 for ``full``.
    """

    rule: str = "full"
    size: int = 1

    def __post_init__(self) -> None:
        if self.rule not in BRANCH_RULES:
            raise ValueError(f"branches rule must be one of {list(BRANCH_RULES)}, got {self.rule!r}")
        if not is_int(self.size) or self.size < 1 or (self.rule == "full" and self.size != 1):
            raise ValueError(f"branches size must be an int >= 1 (1 for 'full'), got {self.size!r}")

    @property
    def name(self) -> str:
        return "full" if self.rule == "full" else f"{self.rule}:{self.size}"

    @property
    def needs_estimates(self) -> bool:
        return self.rule == "likely"

    def select(self, m: int, alpha: torch.Tensor | None) -> tuple[int, ...]:
        """S for a call verifying m draft tokens; ``alpha`` ``(m,)`` acceptance estimates."""
        if self.rule == "full":
            return (m,)
        if self.rule == "first" or m == 0:
            return tuple(range(min(self.size, m + 1)))
        return tuple(sorted(outcome_probabilities(alpha).topk(min(self.size, m + 1)).indices.tolist()))


def outcome_probabilities(alpha: torch.Tensor) -> torch.Tensor:
    """``(m + 1,)`` P(h = k) if draft token i is accepted independently with probability
    alpha_i: alpha_1..alpha_k (1 - alpha_{k+1}) for k < m, alpha_1..alpha_m for k = m."""
    alpha = alpha.double()
    reach = torch.cat([alpha.new_ones(1), alpha.cumprod(0)])          # P(h >= k), k = 0..m
    stop = torch.cat([1.0 - alpha, alpha.new_ones(1)])                # P(reject at k+1 | h >= k)
    return reach * stop


def branch_policy(branches) -> BranchPolicy:
    """A :class:`BranchPolicy` from itself or a string ``"full"``, ``"first:s"``, ``"likely:s"``."""
    if isinstance(branches, BranchPolicy):
        return branches
    if isinstance(branches, str):
        rule, _, size = branches.partition(":")
        if rule in BRANCH_RULES and (size.isdigit() or (not size and rule == "full")):
            return BranchPolicy(rule, int(size) if size else 1)
    raise ValueError(f"branches must be 'full', 'first:<s>', 'likely:<s>' (s an int >= 1) or a BranchPolicy, "
                     f"got {branches!r}")


# ----- the call: one forward over the layout of spec_lib.masks.partial -------------------------

@functools.lru_cache(maxsize=512)
def _template(branches: tuple[int, ...], m: int, width: int, mask_token_id: int, device, dtype
              ) -> masks.LayoutTemplate:
    """A steady-state layout of a ``partial`` call, memoised (bounded) like the other kinds'."""
    last = torch.tensor([-1], device=device)
    draft = -2 - torch.arange(m, device=device)                       # distinct placeholders
    layout = partial_call_kind(branches).build(context=last.new_empty(0), last=last, draft=draft, width=width,
                                               mask_token_id=mask_token_id, start=0)
    ids = layout.input_ids
    draft_slots = torch.stack([(ids == -2 - i).nonzero()[0, 0] for i in range(m)]) if m else ids.new_empty(0)
    layout = replace(layout, new_rows_mask=masks.to_additive(layout.visible(), dtype))
    return masks.LayoutTemplate(layout, (ids == -1).nonzero()[:, 0], draft_slots)


def partial_call(model, spec: PartialCall, prefix: torch.Tensor, draft: torch.Tensor, width: int) -> CallOutput:
    """One ``partial`` call on a :class:`~spec_lib.models.DualModeLM` (its masked forward) or an
    exact toy model (closed form, each block conditioned as :meth:`PartialCall.block_sources`
    says); K/V of all rows pending until ``model.commit``.

    Returns a :class:`CallOutput` whose ``draft_logits`` is ``(1 + |S|, W, V)``: block 0 the
    W positions after P_{t-1}, block 1 + j the W positions after (P_{t-1}, d1..dk, correction)
    for the j-th outcome k of S.
    """
    m = int(draft.numel())
    if isinstance(model, DualModeLM):
        verified = model.state.verified
        context, last = verified.split_prefix(prefix)
        start = verified.cache_len
        if context.numel():                                           # first call: processes the prompt
            layout = spec.build(context=context, last=last, draft=draft, width=width,
                                mask_token_id=model.mask_token_id, start=start)
        else:
            layout = _template(spec.outcomes(m), m, width, model.mask_token_id, model.state.device,
                               model.state.dtype).fill(last, draft, start)
        logits, seconds = model.forward_rows(layout, layout.keep_rows)
        verified.record(layout.n_context, True, layout.rows)
        return CallOutput(logits[: m + 1], logits[m + 1:].reshape(*layout.draft_rows.shape, -1), layout.rows, seconds)
    if isinstance(model, ExactModel):
        context, _ = model.state.split_prefix(prefix)
        started = time.perf_counter()
        target = model.target_logprobs(prefix, draft)
        sources = spec.block_sources(m)
        full = model.draft_logprobs(prefix, draft, max(k for k, _ in sources) + 1, width + 1)   # (k, B, V)
        drafts = torch.stack([full[k, skip: skip + width] for k, skip in sources])
        seconds = time.perf_counter() - started
        rows = spec.rows(int(context.numel()), m, width)
        model.state.record(int(context.numel()), True, rows)
        return CallOutput(target, drafts, rows, seconds)
    raise TypeError(f"partial-branch decoding needs a spec_lib.models.DualModeLM or a spec_lib.toy exact model, "
                    f"got {type(model).__name__}")


class PartialBranchModel:
    """Wraps a model so that :class:`~spec_lib.schedules.state.Decoding` can issue ``partial``
    calls (``kind`` = a :class:`PartialCall`) through its usual accounting; every other
    method is the wrapped model's."""

    def __init__(self, model) -> None:
        self.model = model
        self.vocab_size, self.max_positions, self.device = model.vocab_size, model.max_positions, model.device

    def reset(self) -> None:
        self.model.reset()

    def call(self, kind: PartialCall, prefix: torch.Tensor, draft: torch.Tensor, width: int) -> CallOutput:
        return partial_call(self.model, kind, prefix, draft, width)

    def commit(self, n_appended: int) -> None:
        self.model.commit(n_appended)


# ----- the loop --------------------------------------------------------------------------------

def acceptance_estimates(draft: torch.Tensor, draft_logits: torch.Tensor, q_stored) -> torch.Tensor:
    """``(m,)`` alpha_i: Q_i(d_i) when sampling, the drafter's top probability when greedy."""
    if q_stored is None:
        return torch.softmax(draft_logits.double(), -1).max(-1).values
    if isinstance(q_stored, verify.SparseQ):
        return q_stored.prob_of(draft)
    return q_stored.gather(1, draft[:, None])[:, 0]


def run_partial(dec: Decoding, policy: BranchPolicy, ablation: str | None = None) -> dict:
    """Steps 1-4 of the module docstring; returns extras (branch hits and set sizes)."""
    draft, q_stored, alpha = dec.no_draft, None, None
    hits, sizes = 0, []
    while not dec.stopped:
        branches = policy.select(draft.numel(), alpha)                   # step 1
        out = dec.call(partial_call_kind(branches), draft)               # step 2
        sizes.append(len(branches))
        h, a = dec.verify_and_append(out, draft, q_stored)               # step 3
        if dec.stopped:
            break
        if h in branches:                                                # step 4: Quadratic's step
            hits += 1
            logits = out.draft_logits[1 + branches.index(h)]
            draft, q_stored = dec.sample_draft(logits)
            if ablation == "branch_argmax" and q_stored is not None:
                draft = logits.max(-1).indices                           # wrong: not drawn from Q
        else:                                                            # Packed's step
            logits = out.draft_logits[0, a:]
            draft, q_stored = dec.sample_draft(logits)
        if policy.needs_estimates:
            alpha = acceptance_estimates(draft, logits, q_stored)
    return {"branch_hits": hits, "branches_per_call": sizes, "policy": policy.name}


def decode_partial(model, prompt_ids, *, width: int, max_new_tokens: int, branches="full",
                   temperature: float = 0.0, eos_token_id: int | None = None, seed: int | None = None,
                   draft_top_k: int | None = None, draft_top_p: float | None = None,
                   ablation: str | None = None):
    """Generate with the partial-branch schedule; arguments as :func:`spec_lib.decode`, plus

    Args:
        branches: the branch policy: ``"full"``, ``"first:s"``, ``"likely:s"`` or a
            :class:`BranchPolicy` (see the module docstring).
        ablation: ``None`` or ``"branch_argmax"`` (a negative control, :data:`PARTIAL_ABLATIONS`).

    Returns:
        :class:`~spec_lib.schedules.DecodeResult`; ``extras`` also holds ``branch_hits``
        (iterations whose outcome had a branch), ``branches_per_call`` and ``policy``.

    Raises:
        ValueError: on any invalid argument, before any model call (TypeError for a model
            that is neither a DualModeLM nor an exact toy model).
    """
    started = time.perf_counter()
    policy = branch_policy(branches)
    if ablation not in PARTIAL_ABLATIONS:
        raise ValueError(f"ablation must be one of {list(PARTIAL_ABLATIONS)}, got {ablation!r}")
    if not isinstance(model, (DualModeLM, ExactModel)):
        raise TypeError(f"model must be a spec_lib.models.DualModeLM or a spec_lib.toy exact model for "
                        f"partial-branch decoding, got {type(model).__name__}")
    (prompt,) = validate(model, [prompt_ids], schedule="partial", schedules={"partial": PARTIAL_SCHEDULE},
                         width=width, max_new_tokens=max_new_tokens, temperature=temperature,
                         eos_token_id=eos_token_id, seed=seed, draft_top_k=draft_top_k, draft_top_p=draft_top_p)
    width = int(width)
    rows = masks.call_kind("packed").rows(0, width, width) + policy.size * (width + 1)
    if rows > MAX_ROWS_PER_CALL:
        raise ValueError(f"width={width} with branches={policy.name!r} gives {rows} rows per call, above the limit of "
                         f"{MAX_ROWS_PER_CALL}; allowed: a smaller width or fewer branches")
    window = getattr(model, "attention_window", None)
    if window is not None and max_new_tokens and prompt.numel() + max_new_tokens - 2 + rows > window - 1:
        raise ValueError(f"a sliding-window model of {window} positions cannot hold this decode's "
                         f"{prompt.numel() + max_new_tokens - 2 + rows} cache entries; allowed: max_new_tokens <= "
                         f"{max(0, window + 1 - rows - prompt.numel())}")
    dec = Decoding(PartialBranchModel(model), prompt, width=width, max_new_tokens=int(max_new_tokens),
                   temperature=float(temperature), eos_token_id=None if eos_token_id is None else int(eos_token_id),
                   seed=None if seed is None else int(seed), draft_top_k=draft_top_k, draft_top_p=draft_top_p)
    extras = run_partial(dec, policy, ablation)
    return dec.result(started, **extras)


#: the schedule's record for argument checks: its rows per call depend on the policy and are
#: checked in :func:`decode_partial`; its reach is the registered ``partial`` kind's, 2W + 1.
PARTIAL_SCHEDULE = Schedule("partial", lambda dec: run_partial(dec, BranchPolicy()), ("packed",), None,
                            masks.call_kind("partial").reach)
