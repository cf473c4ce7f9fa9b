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

Branch policies (:class:`~spec_lib.schedules.branches.BranchPolicy`; ``branches=`` of
:func:`spec_lib.decode` with ``schedule="partial"``):

* ``"full"``: S = {m}, the outcome "the whole draft is accepted", so a fully accepted draft
  never leaves the next iteration with an empty draft;
* ``"first:s"``: S = {0, ..., s-1} (clipped to 0..m);
* ``"likely:s"``: the s outcomes with the largest probability under the stored acceptance
  estimates alpha_i (greedy: the drafter's top probability at draft position i; sampling:
  Q_i(d_i)): P(h = k) = alpha_1..alpha_k (1 - alpha_{k+1}), P(h = m) = alpha_1..alpha_m.
  It reads the estimates on the host: one extra device sync per iteration.

It runs through :func:`spec_lib.decode` (``schedule="partial", branches=...``); its records are
the ``partial`` entry of :data:`spec_lib.schedules.SCHEDULE_SPECS` and the call kind ``partial``.
"""

from __future__ import annotations

import functools
import time
from dataclasses import replace

import torch

from .. import masks, verify
from ..masks.partial import PartialCall, partial_call_kind
from ..models import CallOutput, DualModeLM
from ..toy import ExactModel
from .branches import BranchPolicy
from .state import Decoding

#: deliberately wrong variants, for negative controls only: ``branch_argmax`` drafts a
#: branch's tokens by argmax but stores the branch's full distribution as their Q.
PARTIAL_ABLATIONS = (None, "branch_argmax")

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
