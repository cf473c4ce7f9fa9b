"""Deliberately wrong variants of rejection sampling, for negative controls only.

Seed 000, Theorem 3.3 and Lemma B.4 hold only with the exact bookkeeping of Algorithm 2;
notebook 03 and the sampling tests show that each of these breaks the output law, so that
the exactness checks are known to be able to fail:

  * ``"fresh_q"``: Packed-SS divides by the drafter's *current* distribution at the
    draft's positions, q_t^(i)(. | P_{t-1}), instead of the stored Q_{t-1}^(i) (line 5);
  * ``"no_residual"``: the correction is drawn from p instead of [p - Q]_+ (line 7), any
    schedule;
  * ``"resample_without_q"``: Packed-SS re-draws the retained positions from q_t but keeps
    the Q stored when they were first drafted (lines 12-13).

The correct algorithm never reads this module except to ask :func:`uses_residual`.
"""

from __future__ import annotations

import torch

from .. import verify

ABLATIONS = (None, "fresh_q", "no_residual", "resample_without_q")


def uses_residual(ablation: str | None) -> bool:
    """Whether corrections are drawn from [p - Q]_+ (everything but ``no_residual``)."""
    return ablation != "no_residual"


def packed_verification_q(ablation: str | None, q_new, n_draft: int):
    """``fresh_q``: the Q to divide by is the drafter's current distribution at the draft's
    positions; None (use the stored Q) otherwise."""
    if ablation == "fresh_q" and q_new is not None:
        return q_new[:n_draft]
    return None


def packed_retained(ablation: str | None, z: torch.Tensor, q_new, q_stored, a: int, n_draft: int):
    """``resample_without_q``: the next draft is z[a:] but the overlap with the previous
    draft keeps its old stored Q.  Returns ``(draft, Q)`` or None when not this ablation."""
    if ablation != "resample_without_q" or q_stored is None or q_new is None:
        return None
    n_old = max(0, n_draft - a)
    q_keep = _dense(q_stored)[a:]                                  # old Q for the overlap
    q_tail = _dense(q_new)[a + n_old:]
    return z[a:], torch.cat([q_keep[:n_old], q_tail])


def _dense(q):
    return q.dense() if isinstance(q, verify.SparseQ) else q
