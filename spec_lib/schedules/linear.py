"""Linear-SS: draft from the newest verified prefix, then verify; two calls per iteration.

Reference: seed 000, Sec. 1 and Sec. 3.1 "Comparison with Linear-SS"; App. D.1 (the
drafting block ``[last, MASK^(B-1)]`` and the verify call ``[last, d^(1..B-1)]``);
Lemma B.1: one iteration maps a verified length c to F(c).

The first drafting call also processes the prompt (its causal context rows enter the
cache), so an iteration is always exactly two NFE and the prompt is counted once.
"""

from __future__ import annotations

from .state import Decoding


def run_linear(dec: Decoding) -> None:
    """Each iteration: drafting call from P_{t-1} (W proposals), then verification call."""
    while not dec.stopped:
        drafting = dec.call("linear_draft")
        draft, q_stored = dec.sample_draft(drafting.draft_logits[0])   # W tokens after P_{t-1}
        dec.model.commit(0)                                             # proposals never enter the cache
        verifying = dec.call("verify", draft)
        dec.verify_and_append(verifying, draft, q_stored)
