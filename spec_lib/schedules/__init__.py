"""The decode entry point and the four LTR schedules (seed 000, Sec. 3, Algorithms 1-2).

``decode(model, prompt_ids, schedule=..., width=..., max_new_tokens=...)`` runs one of

  * ``ar``         plain AR decoding, one token per call (the reference);
  * ``linear``     Linear-SS: draft call + verify call per iteration;
  * ``quadratic``  Quadratic-SS: one call with a draft branch per verification outcome;
  * ``packed``     Packed-SS: one call verifies D_{t-1} and drafts from P_{t-1};
  * ``deer``       a separate one-step diffusion drafter (seed 001, DEER), then verify;
  * ``ar_draft``   a separate AR drafter, k passes (the EAGLE-3 role in seed 001), then verify.

on any :class:`spec_lib.models.SpecModel` (a :class:`~spec_lib.models.DualModeLM` or an
exact toy model), greedily (temperature 0) or with exact rejection sampling.
"""

from __future__ import annotations

import time

from .ar import run_ar
from .ar_draft import run_ar_draft
from .common import (
    ABLATIONS,
    ALL_SCHEDULES,
    DRAFTER_SCHEDULES,
    SCHEDULES,
    DecodeResult,
    Decoding,
    validate,
)
from .deer import run_deer
from .linear import run_linear
from .packed import run_packed
from .quadratic import run_quadratic

_RUNNERS = {"ar": run_ar, "linear": run_linear, "quadratic": run_quadratic, "packed": run_packed,
            "deer": run_deer, "ar_draft": run_ar_draft}

__all__ = ["ABLATIONS", "ALL_SCHEDULES", "DRAFTER_SCHEDULES", "SCHEDULES", "DecodeResult", "decode"]


def decode(model, prompt_ids, *, schedule: str, width: int, max_new_tokens: int,
           temperature: float = 0.0, eos_token_id: int | None = None, seed: int | None = None,
           draft_top_k: int | None = None, draft_top_p: float | None = None,
           ablation: str | None = None, drafter=None) -> DecodeResult:
    """Generate up to ``max_new_tokens`` tokens after ``prompt_ids`` with one schedule.

    Args:
        model: a :class:`spec_lib.models.SpecModel` (``DualModeLM`` or ``toy.MarkovLM``).
        prompt_ids: non-empty 1-D sequence of token ids (list, array or tensor).
        schedule: ``"ar" | "linear" | "quadratic" | "packed" | "deer" | "ar_draft"``.
        width: speculative width W >= 1 (block size B = W + 1; ignored by ``ar``); for
            ``deer`` / ``ar_draft`` it is the drafter's block size k.
        max_new_tokens: output length limit L >= 0.
        temperature: 0 for greedy; > 0 samples from the tempered target exactly
            (the same temperature tempers q_draft).
        eos_token_id: stop at the first accepted EOS (it is included in ``tokens``).
        seed: seeds the sampling generator (temperature > 0); None means 0, so that
            runs are reproducible by default.
        draft_top_k, draft_top_p: truncate q_draft to its top-k / top-p support; the
            truncated Q is what drafts are sampled from and what is stored (sparsely) for
            verification (Sec. 3.2, last paragraph).  Ignored when greedy.
        ablation: ``None``, or a deliberately wrong variant for negative controls:
            ``"fresh_q"`` (Packed: divide by the current drafter distribution, not the
            stored Q), ``"no_residual"`` (correction drawn from p instead of [p - Q]_+),
            ``"resample_without_q"`` (Packed: stale Q for re-drafted positions).
        drafter: the separate drafter of ``deer`` (a diffusion drafter) or ``ar_draft``
            (an AR drafter), from :mod:`spec_lib.drafters`; None for the other schedules.
            Its calls are reported in ``extras`` as ``drafter_nfe``, ``drafter_seconds``
            and ``drafter_rows_per_call``; ``nfe`` counts target calls, ``model_seconds``
            both models' forward time.

    Returns:
        :class:`DecodeResult` with ``tokens, nfe, accepted, rows_per_call,
        model_seconds, wall_seconds``.

    Raises:
        ValueError: on any invalid argument, before any model call.
    """
    started = time.perf_counter()
    prompt = validate(model, prompt_ids, schedule=schedule, width=width, max_new_tokens=max_new_tokens,
                      temperature=temperature, eos_token_id=eos_token_id, seed=seed,
                      draft_top_k=draft_top_k, draft_top_p=draft_top_p, drafter=drafter)
    dec = Decoding(model, prompt, width=int(width), max_new_tokens=int(max_new_tokens),
                   temperature=float(temperature), eos_token_id=None if eos_token_id is None else int(eos_token_id),
                   seed=seed, draft_top_k=draft_top_k, draft_top_p=draft_top_p, ablation=ablation,
                   drafter=drafter)
    _RUNNERS[schedule](dec)
    return dec.result(started)
