"""Summaries of decode results (per-schedule tables); statistics grow here.

Metric definitions follow seed 000, Sec. 4 "Experimental setup" and App. E.5:
tokens/NFE, time/NFE, throughput = generated tokens / decoder wall time.
"""

from __future__ import annotations

import pandas as pd

from .schedules import DecodeResult


def decode_table(results: dict[str, DecodeResult], reference: str | None = "ar") -> pd.DataFrame:
    """One row per schedule: tokens, NFE, tokens/NFE, rows per call, accepted per iteration.

    ``identical`` compares each schedule's tokens with ``results[reference]``.
    """
    rows = []
    ref_tokens = results[reference].tokens if reference in results else None
    for name, res in results.items():
        n = len(res.tokens)
        rows.append({
            "schedule": name,
            "tokens": n,
            "nfe": res.nfe,
            "tokens_per_nfe": n / res.nfe if res.nfe else float("nan"),
            "max_rows_per_call": max(res.rows_per_call, default=0),
            "steady_rows_per_call": res.rows_per_call[-1] if res.rows_per_call else 0,
            "accepted": " ".join(map(str, res.accepted)),
            "identical": None if ref_tokens is None else res.tokens == ref_tokens,
            "model_ms": 1e3 * res.model_seconds,
            "wall_ms": 1e3 * res.wall_seconds,
        })
    return pd.DataFrame(rows)
