"""Speculative decoding with a separate AR drafter (the EAGLE-3 role in seed 001).

Reference: seed 001, Sec. 3.4 "Critical difference from AR drafters": draft token i is
drawn from q(. | x_{1:j}, y_{j+1:j+i-1}), so k drafts cost k drafter passes; verification
(Eq. 5-6) is the same as DEER's, with Q the distribution each draft was drawn from.
"""

from __future__ import annotations

from .common import Decoding


def run_ar_draft(dec: Decoding) -> None:
    """Each cycle: k drafter passes, then one target verification pass."""
    while not dec.stopped:
        draft, q_stored, seconds, rows = dec.drafter.draft(dec.prefix, dec.width, dec.propose)
        dec.count_drafter(seconds, rows)
        verifying = dec.call("linear_verify", draft)
        dec.verify_and_append(verifying, draft, q_stored)
