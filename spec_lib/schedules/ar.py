"""Plain autoregressive decoding with the KV cache: one token per call (the reference)."""

from __future__ import annotations

from .state import Decoding


def run_ar(dec: Decoding) -> None:
    """One causal ``verify`` call with no draft per token; the first call processes the
    prompt (App. E.5)."""
    while not dec.stopped:
        out = dec.call("verify")
        dec.verify_and_append(out, dec.no_draft, None)
