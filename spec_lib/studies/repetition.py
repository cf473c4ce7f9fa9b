"""How repetitive a text is: read acceptance against the text it was measured on.

A small model's greedy text often loops, and a drafter that continues a loop is accepted
almost always: acceptance earned on loops says little about drafting.  Every tokens /
iteration or tau figure of the notebooks is reported beside the **repetition share** of
the outputs it was measured on: the share of output tokens that close an n-gram which
already occurred earlier in the same output (n = 4 by default; the prompt is not counted).

:func:`acceptance_by_repetition` splits each iteration's accepted tokens by whether they are
repeated, so that acceptance on fresh text can be read on its own; :func:`repetition_report`
puts both beside the repetition share of the outputs and of the real text, one row per group, for
the run tables of every decoding notebook.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from ..training import unlikelihood
from . import slices

NGRAM = unlikelihood.NGRAM


def repeated_mask(tokens, n: int = NGRAM) -> np.ndarray:
    """``(len,)`` bool: token i closes an n-gram tokens[i-n+1..i] seen earlier in ``tokens``
    (:func:`spec_lib.training.unlikelihood.repeated_ngrams`, the measure stage 2 trains against)."""
    row = torch.as_tensor(list(tokens), dtype=torch.long).reshape(1, -1)
    return unlikelihood.repeated_ngrams(row, n)[0].numpy()


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
        key = dict(zip(by, values if isinstance(values, tuple) else (values,)))
        rows.append({**key, **_split_summary(part["output"], part["accepted"], n)})
    return pd.DataFrame(rows)


def split_iterations(output, accepted, n: int = NGRAM) -> tuple[list[int], list[int]]:
    """``(fresh, repeated)``: the tokens appended per iteration (``accepted``, which must add up to
    the output's length), split by whether an iteration appended a token that closes a repeated
    n-gram of ``output`` (:func:`repeated_mask`).

    Raises:
        ValueError: ``accepted`` does not add up to ``len(output)`` (the split would be misaligned).
    """
    accepted = [int(a) for a in accepted]
    if sum(accepted) != len(output):
        raise ValueError(f"accepted lengths add up to {sum(accepted)}, the output has {len(output)} tokens")
    mask = repeated_mask(output, n)
    fresh, repeated = [], []
    for a, end in zip(accepted, np.cumsum(accepted)):
        (repeated if mask[end - a: end].any() else fresh).append(a)
    return fresh, repeated


def _split_summary(outputs, accepted, n: int) -> dict:
    fresh, repeated = [], []
    for output, lengths in zip(outputs, accepted):
        f, r = split_iterations(output, lengths, n)
        fresh += f
        repeated += r
    return {"fresh_iterations": len(fresh), "repeated_iterations": len(repeated),
            "fresh_tokens_per_iteration": float(np.mean(fresh)) if fresh else float("nan"),
            "repeated_tokens_per_iteration": float(np.mean(repeated)) if repeated else float("nan")}


def reference_by_prompt(tokenizer, counts: dict[str, int], caps: dict[str, int] | int, seed: int = 0,
                        n: int = NGRAM) -> pd.DataFrame:
    """One row per prompt (``slice``, ``prompt``: its index in
    :func:`spec_lib.studies.bench.slice_prompts` with the same ``counts`` and ``seed``): the
    repetition share of its *real* continuation (the canonical or original text,
    :func:`spec_lib.studies.slices.eval_examples`), tokenized and cut to the slice's output cap
    (``caps``: per slice, or one cap for all), and the tokens kept (``tokens``)."""
    if not isinstance(caps, dict):
        caps = dict.fromkeys(counts, caps)
    rows = []
    for name, count in counts.items():
        if not count:
            continue
        examples = slices.eval_examples(name, count, seed=seed)
        ids = tokenizer([e.reference for e in examples], add_special_tokens=False)["input_ids"]
        rows += [{"slice": name, "prompt": i, "tokens": min(len(t), caps[name]),
                  "reference_repetition": repetition_share(t[: caps[name]], n)} for i, t in enumerate(ids)]
    return pd.DataFrame(rows, columns=["slice", "prompt", "tokens", "reference_repetition"])


def reference_shares(tokenizer, counts: dict[str, int], caps: dict[str, int] | int, seed: int = 0,
                     n: int = NGRAM) -> pd.DataFrame:
    """Repetition share of the *real* continuations of each slice's prompts (the canonical or
    original text, :func:`spec_lib.studies.slices.eval_examples`), tokenized and cut to the
    slice's output cap: what a model that writes like the data would show."""
    per_prompt = reference_by_prompt(tokenizer, counts, caps, seed, n)
    return (per_prompt.groupby("slice", sort=False)
            .agg(references=("prompt", "size"), mean_tokens=("tokens", "mean"),
                 reference_repetition=("reference_repetition", "mean"))
            .reset_index().astype({"mean_tokens": float}))


#: Columns of :func:`repetition_report` after the group keys.
REPORT_COLUMNS = ("responses", "repetition", "reference_repetition", "fresh_tokens_per_iteration",
                  "repeated_tokens_per_iteration", "fresh_iterations", "repeated_iterations")


def repetition_report(runs, tokenizer, counts: dict[str, int], caps: dict[str, int] | int, seed: int = 0,
                      by=("slice", "method"), n: int = NGRAM) -> pd.DataFrame:
    """Acceptance beside the text it was earned on: one row per group of ``runs``.

    ``runs`` is a run table (:func:`spec_lib.studies.bench.run_grid`, one row per response with
    ``slice``, ``prompt``, ``method``, ``output`` and ``accepted``, the tokens appended per
    iteration) or ``{temperature: run table}`` (:func:`spec_lib.studies.acceptance.run_by_temperature`),
    which is grouped by ``temperature`` first.  ``counts``, ``caps`` and ``seed`` are those the
    prompts were chosen and decoded with (:func:`spec_lib.studies.bench.slice_prompts`).

    Columns after the group keys (:data:`REPORT_COLUMNS`): ``responses``; ``repetition``, the mean
    share of output tokens that close an n-gram already seen in the same output
    (:func:`repetition_share`); ``reference_repetition``, the same share of the real continuations
    of the group's prompts cut to the same cap (each decoded prompt once,
    :func:`reference_by_prompt`); ``fresh_tokens_per_iteration`` and
    ``repeated_tokens_per_iteration``, the mean tokens appended by iterations whose tokens are all
    fresh and by those touching repeated text, over every iteration (the last, possibly cut, one
    included), with their counts ``fresh_iterations`` and ``repeated_iterations``
    (:func:`split_iterations`).  Plain AR (``schedule`` ``"ar"``) appends one token per call and
    has no draft to split: its four split columns are NaN.

    Raises:
        ValueError: a column is missing, or a response's accepted lengths do not add up to its output.
    """
    by = tuple(by)
    if isinstance(runs, dict):
        runs = pd.concat([grid.assign(temperature=t) for t, grid in runs.items()], ignore_index=True)
        by = by if "temperature" in by else ("temperature", *by)
    missing = {*by, "slice", "prompt", "output", "accepted"} - set(runs.columns)
    if missing:
        raise ValueError(f"runs lack the columns {sorted(missing)}")
    reference = (reference_by_prompt(tokenizer, counts, caps, seed, n)
                 .set_index(["slice", "prompt"])["reference_repetition"])
    plain_ar = runs["schedule"] == "ar" if "schedule" in runs else runs["method"] == "ar"
    rows = []
    for values, part in runs.groupby(list(by), sort=False):
        key = dict(zip(by, values if isinstance(values, tuple) else (values,)))
        prompts = pd.MultiIndex.from_frame(part[["slice", "prompt"]].drop_duplicates())
        split = dict.fromkeys(REPORT_COLUMNS[3:], float("nan"))
        if not plain_ar[part.index].all():
            split = _split_summary(part["output"], part["accepted"], n)
        rows.append({**key, "responses": len(part),
                     "repetition": float(np.mean([repetition_share(o, n) for o in part["output"]])),
                     "reference_repetition": float(reference.reindex(prompts).mean()), **split})
    return pd.DataFrame(rows, columns=[*by, *REPORT_COLUMNS])
