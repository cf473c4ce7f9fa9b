"""DEER: a separate one-step diffusion drafter, verified by the AR target with its KV cache.

Reference: seed 001, Sec. 3.4 "Inference" and Algorithm 1: the drafter proposes
y_{j+1:j+k} ~ q_theta(. | x_{1:j}) in one forward pass; the target scores [last, y] in one
pass over its cache; tokens are accepted left to right with min(1, p / q) (Eq. 5), the first
rejection is replaced from [p - q]_+ (Eq. 6), a full acceptance earns a bonus token.

The loop is Linear-SS's (seed 000) with the drafting call sent to a different model: the
verification, stopping and cache update are the shared :class:`Decoding` code.  Target
calls count as ``nfe``; drafter calls are reported in ``extras`` (``drafter_nfe`` ...).
"""

from __future__ import annotations

from .common import Decoding


def run_deer(dec: Decoding) -> None:
    """Each cycle: one drafter pass (k = W proposals), then one target verification pass."""
    while not dec.stopped:
        logits, seconds, rows = dec.drafter.propose(dec.prefix, dec.width)
        dec.count_drafter([seconds], [rows])
        draft, q_stored = dec.propose(logits)
        verifying = dec.call("linear_verify", draft)
        dec.verify_and_append(verifying, draft, q_stored)
