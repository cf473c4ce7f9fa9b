"""Speculative decoding with a separate drafter: DEER (``deer``) and an AR drafter (``ar_draft``).

References (seed 001):
  * Sec. 3.4 "Inference" and Algorithm 1: the diffusion drafter proposes y_{j+1:j+k} ~
    q_theta(. | x_{1:j}) in one forward pass; the target scores [last, y] in one pass over
    its cache; tokens are accepted left to right with min(1, p / q) (Eq. 5), the first
    rejection is replaced from [p - q]_+ (Eq. 6), a full acceptance earns a bonus token.
  * Sec. 3.4 "Critical difference from AR drafters": an AR drafter's draft i is drawn from
    q(. | x_{1:j}, y_{j+1:j+i-1}), so k drafts cost k drafter passes; verification is the same.

The loop is Linear-SS's (seed 000) with the drafting call sent to a different model: the
verification, stopping and cache update are the shared :class:`Decoding` code.  Target
calls count as ``nfe``; drafter calls are reported in ``extras`` (``drafter_nfe`` ...).
"""

from __future__ import annotations

from .state import Decoding


def run_drafted(dec: Decoding) -> None:
    """Each cycle: the drafter's k = W proposals, then one target verification pass."""
    while not dec.stopped:
        draft, q_stored = dec.draft_with(dec.drafter)
        verifying = dec.call("verify", draft)
        dec.verify_and_append(verifying, draft, q_stored)
