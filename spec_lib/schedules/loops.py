"""The left-to-right loops of the schedules, each over one :class:`~spec_lib.schedules.state.Decoding`
(which holds the verification, stopping and cache update they share).

References:
  * ``run_ar``: plain autoregressive decoding with the KV cache, one token per call (the
    reference); the first call processes the prompt (seed 000, App. E.5).
  * ``run_linear``: Linear-SS, seed 000 Sec. 1 and Sec. 3.1 "Comparison with Linear-SS"; App.
    D.1 (the drafting block ``[last, MASK^(B-1)]`` and the verify call ``[last, d^(1..B-1)]``);
    Lemma B.1: one iteration maps a verified length c to F(c).  The first drafting call also
    processes the prompt (its causal context rows enter the cache), so an iteration is always
    exactly two NFE and the prompt is counted once.
  * ``run_quadratic``: Quadratic-SS, seed 000 Sec. 1 and Sec. 3.1 "Comparison" (the selected
    proposal excludes only the final verifier token of P_t); App. D.3 Table 2 (B(B+1) rows);
    App. E.4 (at temperature > 0 the verification result selects the branch matching the
    accepted draft prefix, then its next draft tokens are sampled and stored with their
    distributions).
  * ``run_packed``: Packed-SS, seed 000 Algorithm 1 (greedy) and Algorithm 2 (rejection sampling):

        line 1   P_0 = P, D_0 = Q_0 = ∅
        line 3-4 one call: p_t^(i) for i <= |D_{t-1}| + 1 and q_t^(j | P_{t-1}) for j <= W
        line 5-8 accept with the stored Q_{t-1}; correction or bonus; A_t = h_t + 1
        line 9   a = ending condition (first accepted EOS or the length limit)
        line 12  Q_t^(j) = q_t^(a+j), d_t^(j) ~ Q_t^(j), j = 1..W - a
        line 13  D_t = (d_t^(1), ..., d_t^(W-a))

    The padded physical layout ``[last, D̄ | last, MASK^W]`` is built by the model adapter
    (App. D.1); here only the logical call is described.  Negative controls (``dec.ablation``)
    are in :mod:`spec_lib.schedules.ablations`.
  * ``run_drafted``: a separate drafter (seed 001, DEER): Sec. 3.4 "Inference" and Algorithm 1,
    the diffusion drafter proposes y_{j+1:j+k} ~ q_theta(. | x_{1:j}) in one forward pass and
    the target scores [last, y] in one pass over its cache, tokens accepted left to right with
    min(1, p / q) (Eq. 5), the first rejection replaced from [p - q]_+ (Eq. 6), a full
    acceptance earning a bonus token; Sec. 3.4 "Critical difference from AR drafters": an AR
    drafter's draft i is drawn from q(. | x_{1:j}, y_{j+1:j+i-1}), so k drafts cost k drafter
    passes (``ar_draft``), verified the same way.  The loop is Linear-SS's with the drafting
    call sent to another model; target calls count as ``nfe``, drafter calls are reported in
    ``extras`` (``drafter_nfe`` ...).

Partial-branch decoding, whose call and branch policy are larger, is
:mod:`spec_lib.schedules.partial`.
"""

from __future__ import annotations

from . import ablations
from .state import Decoding


def run_ar(dec: Decoding) -> None:
    """One causal ``verify`` call with no draft per token."""
    while not dec.stopped:
        out = dec.call("verify")
        dec.verify_and_append(out, dec.no_draft, None)


def run_linear(dec: Decoding) -> None:
    """Each iteration: drafting call from P_{t-1} (W proposals), then verification call."""
    while not dec.stopped:
        drafting = dec.call("linear_draft")
        draft, q_stored = dec.sample_draft(drafting.draft_logits[0])   # W tokens after P_{t-1}
        dec.model.commit(0)                                             # proposals never enter the cache
        verifying = dec.call("verify", draft)
        dec.verify_and_append(verifying, draft, q_stored)


def run_quadratic(dec: Decoding) -> None:
    """Branch k drafts B positions after (P_{t-1}, d^(1..k)); branch h_t is kept."""
    draft = dec.no_draft                                             # D_0 = ∅
    q_stored = None
    while not dec.stopped:
        out = dec.call("quadratic", draft)
        h, _ = dec.verify_and_append(out, draft, q_stored)
        if dec.stopped:
            break
        # Branch h: row 0 is the position the verifier just filled (correction or
        # bonus), rows 1..W are the next draft, conditioned on P_t minus its last token.
        draft, q_stored = dec.sample_draft(out.draft_logits[h, 1:])


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


def run_drafted(dec: Decoding) -> None:
    """Each cycle: the drafter's k = W proposals, then one target verification pass."""
    while not dec.stopped:
        draft, q_stored = dec.draft_with(dec.drafter)
        verifying = dec.call("verify", draft)
        dec.verify_and_append(verifying, draft, q_stored)
