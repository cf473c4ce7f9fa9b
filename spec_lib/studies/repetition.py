"""How repetitive a text is: read acceptance against the text it was measured on.

A small model's greedy text often loops, and a drafter that continues a loop is accepted
almost always: acceptance earned on loops says little about drafting.  Every tokens /
iteration or tau figure of the notebooks is reported beside the **repetition share** of
the outputs it was measured on: the share of output tokens that close an n-gram which
already occurred earlier in the same output (n = 4 by default; the prompt is not counted).

:func:`acceptance_by_repetition` splits each iteration's accepted tokens by whether they are
repeated, so that acceptance on fresh text can be read on its own.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..training import data

NGRAM = 4


def repeated_mask(tokens, n: int = NGRAM) -> np.ndarray:
    """``(len,)`` bool: token i closes an n-gram tokens[i-n+1..i] seen earlier in ``tokens``."""
    tokens = list(tokens)
    out = np.zeros(len(tokens), dtype=bool)
    seen: set[tuple] = set()
    for i in range(n - 1, len(tokens)):
        gram = tuple(tokens[i - n + 1: i + 1])
        out[i] = gram in seen
        seen.add(gram)
    return out


def repetition_share(tokens, n: int = NGRAM) -> float:
    """Share of tokens that close a repeated n-gram (0 for an empty output)."""
    mask = repeated_mask(tokens, n)
    return float(mask.mean()) if mask.size else 0.0


def add_repetition(runs: pd.DataFrame, n: int = NGRAM) -> pd.DataFrame:
    """``runs`` (one row per response, with ``output``) plus a ``repetition`` column."""
    out = runs.copy()
    out["repetition"] = [repetition_share(o, n) for o in out["output"]]
    return out


def acceptance_by_repetition(runs: pd.DataFrame, n: int = NGRAM, by=("slice", "method")) -> pd.DataFrame:
    """Mean tokens per iteration over iterations whose appended tokens are all fresh, and over
    those with at least one repeated token, per group (columns ``fresh_tokens_per_iteration``,
    ``repeated_tokens_per_iteration``, ``fresh_iterations``, ``repeated_iterations``)."""
    rows = []
    for values, part in runs.groupby(list(by), sort=False):
        fresh, repeated = [], []
        for output, accepted in zip(part["output"], part["accepted"]):
            mask = repeated_mask(output, n)
            ends = np.cumsum(accepted)
            for a, end in zip(accepted, ends):
                (repeated if mask[end - a: end].any() else fresh).append(a)
        key = dict(zip(by, values if isinstance(values, tuple) else (values,)))
        rows.append({**key, "fresh_iterations": len(fresh), "repeated_iterations": len(repeated),
                     "fresh_tokens_per_iteration": float(np.mean(fresh)) if fresh else float("nan"),
                     "repeated_tokens_per_iteration": float(np.mean(repeated)) if repeated else float("nan")})
    return pd.DataFrame(rows)


def reference_shares(tokenizer, counts: dict[str, int], caps: dict[str, int], seed: int = 0,
                     n: int = NGRAM) -> pd.DataFrame:
    """Repetition share of the *real* continuations of each slice's prompts (the canonical or
    original text, :func:`spec_lib.training.data.eval_examples`), tokenized and cut to the
    slice's output cap: what a model that writes like the data would show."""
    rows = []
    for name, count in counts.items():
        if not count:
            continue
        examples = data.eval_examples(name, count, seed=seed)
        ids = tokenizer([e.reference for e in examples], add_special_tokens=False)["input_ids"]
        shares = [repetition_share(t[: caps[name]], n) for t in ids]
        rows.append({"slice": name, "references": len(ids), "mean_tokens": float(np.mean([min(len(t), caps[name])
                                                                                         for t in ids])),
                     "reference_repetition": float(np.mean(shares))})
    return pd.DataFrame(rows)
