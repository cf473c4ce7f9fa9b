"""Packed-SS: verify D_{t-1} and draft Z_t from P_{t-1} in one call; keep Z_t's suffix.

Reference: seed 000, Algorithm 1 (greedy) and Algorithm 2 (rejection sampling):

    line 1   P_0 = P, D_0 = Q_0 = ∅
    line 3-4 one call: p_t^(i) for i <= |D_{t-1}| + 1 and q_t^(j | P_{t-1}) for j <= W
    line 5-8 accept with the stored Q_{t-1}; correction or bonus; A_t = h_t + 1
    line 9   a = ending condition (first accepted EOS or the length limit)
    line 12  Q_t^(j) = q_t^(a+j), d_t^(j) ~ Q_t^(j), j = 1..W - a
    line 13  D_t = (d_t^(1), ..., d_t^(W-a))

The padded physical layout ``[last, D̄ | last, MASK^W]`` is built by the model adapter
(App. D.1); here only the logical call is described.  Negative controls (``dec.ablation``)
are in :mod:`spec_lib.schedules.ablations`.
"""

from __future__ import annotations

from . import ablations
from .state import Decoding


def run_packed(dec: Decoding) -> None:
    """Algorithms 1 and 2, line by line (see the module docstring)."""
    draft = dec.no_draft                                             # D_0 = ∅
    q_stored = None                                                  # Q_0 = ∅
    while not dec.stopped:
        out = dec.call("packed", draft)                              # lines 3-4
        z, q_new = dec.sample_draft(out.draft_logits[0])             # Z_t ~ q_t(. | P_{t-1})
        q_verify = ablations.packed_verification_q(dec.ablation, q_new, draft.numel())
        _, a = dec.verify_and_append(out, draft, q_stored, q_verify)  # lines 5-11
        if dec.stopped:
            break
        wrong = ablations.packed_retained(dec.ablation, z, q_new, q_stored, a, draft.numel())
        if wrong is not None:
            draft, q_stored = wrong
            continue
        draft = z[a:]                                                # line 13
        q_stored = None if q_new is None else q_new[a:]              # line 12
