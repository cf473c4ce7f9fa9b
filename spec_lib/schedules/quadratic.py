"""Quadratic-SS: one call verifies and pre-drafts a continuation for every outcome.

Reference: seed 000, Sec. 1 and Sec. 3.1 "Comparison" (the selected proposal excludes
only the final verifier token of P_t); App. D.3 Table 2 (B(B+1) rows); App. E.4 (at
temperature > 0 the verification result selects the branch matching the accepted draft
prefix, then its next draft tokens are sampled and stored with their distributions).
"""

from __future__ import annotations

from .state import Decoding


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
