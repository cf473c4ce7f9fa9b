"""Plain autoregressive decoding with the KV cache: one token per call (the reference)."""

from __future__ import annotations

from .common import Decoding


def run_ar(dec: Decoding) -> None:
    """One causal call per token; the first call processes the prompt (App. E.5)."""
    while not dec.stopped:
        out = dec.call("ar")
        dec.verify_and_append(out, dec.no_draft, None)
