"""The decode entry point and the schedules (seed 000, Sec. 3, Algorithms 1-2; seed 001, Sec. 3.4).

``decode(model, prompt_ids, schedule=..., width=..., max_new_tokens=...)`` runs one of

  * ``ar``         plain AR decoding, one token per call (the reference);
  * ``linear``     Linear-SS: draft call + verify call per iteration;
  * ``quadratic``  Quadratic-SS: one call with a draft branch per verification outcome;
  * ``packed``     Packed-SS: one call verifies D_{t-1} and drafts from P_{t-1};
  * ``deer``       a separate one-step diffusion drafter (seed 001, DEER), then verify;
  * ``ar_draft``   a separate AR drafter, k passes (the EAGLE-3 role in seed 001), then verify.

on any :class:`spec_lib.models.SpecModel` (a :class:`~spec_lib.models.DualModeLM` or an
exact toy model), greedily (temperature 0) or with exact rejection sampling.
:data:`SCHEDULE_SPECS` records, per schedule, its calls per steady-state iteration, the
drafter it needs and how far past the prefix its calls reach.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from .ablations import ABLATIONS
from .ar import run_ar
from .drafted import run_drafted
from .linear import run_linear
from .packed import run_packed
from .quadratic import run_quadratic
from .state import DecodeResult, Decoding
from .validation import validate


@dataclass(frozen=True)
class Schedule:
    """One schedule: how it runs and what it needs.

    Attributes:
        name: the ``schedule`` argument of :func:`decode`.
        run: the loop, over a :class:`Decoding`.
        calls: call kinds of one steady-state iteration (NFE per iteration = len(calls)).
        drafter: the separate drafter kind it needs (``"diffusion"``, ``"ar"``) or None.
        reach: ``width -> `` how far past the last verified position its calls (the
            target's) place rows.
    """

    name: str
    run: Callable[[Decoding], None]
    calls: tuple[str, ...]
    drafter: str | None
    reach: Callable[[int], int]


SCHEDULE_SPECS: dict[str, Schedule] = {s.name: s for s in (
    Schedule("ar", run_ar, ("verify",), None, lambda w: 0),
    Schedule("linear", run_linear, ("linear_draft", "verify"), None, lambda w: w),
    Schedule("quadratic", run_quadratic, ("quadratic",), None, lambda w: 2 * w + 1),
    Schedule("packed", run_packed, ("packed",), None, lambda w: w),
    Schedule("deer", run_drafted, ("verify",), "diffusion", lambda w: w),
    Schedule("ar_draft", run_drafted, ("verify",), "ar", lambda w: w),
)}

#: Schedules that need only the model (self-speculative, seed 000).
SCHEDULES = tuple(n for n, s in SCHEDULE_SPECS.items() if s.drafter is None)
#: Schedules that draft with a separate model, and the drafter kind each one needs (seed 001).
DRAFTER_SCHEDULES = {n: s.drafter for n, s in SCHEDULE_SPECS.items() if s.drafter is not None}
ALL_SCHEDULES = tuple(SCHEDULE_SPECS)

__all__ = ["ABLATIONS", "ALL_SCHEDULES", "DRAFTER_SCHEDULES", "SCHEDULES", "SCHEDULE_SPECS", "DecodeResult",
           "Schedule", "decode"]


def decode(model, prompt_ids, *, schedule: str, width: int, max_new_tokens: int,
           temperature: float = 0.0, eos_token_id: int | None = None, seed: int | None = None,
           draft_top_k: int | None = None, draft_top_p: float | None = None,
           ablation: str | None = None, drafter=None) -> DecodeResult:
    """Generate up to ``max_new_tokens`` tokens after ``prompt_ids`` with one schedule.

    Args:
        model: a :class:`spec_lib.models.SpecModel` (``DualModeLM`` or ``toy.MarkovLM``).
        prompt_ids: non-empty 1-D sequence of token ids (list, array or tensor; shape
            ``(n,)`` or ``(1, n)``).
        schedule: ``"ar" | "linear" | "quadratic" | "packed" | "deer" | "ar_draft"``.
        width: speculative width W in [1, 1024] (block size B = W + 1; ignored by ``ar``);
            for ``deer`` / ``ar_draft`` it is the drafter's block size k.
        max_new_tokens: output length limit L >= 0.
        temperature: 0 for greedy; > 0 samples from the tempered target exactly
            (the same temperature tempers q_draft).
        eos_token_id: stop at the first accepted EOS (it is included in ``tokens``).
        seed: seeds the sampling generator (temperature > 0), an int in [0, 2**64); None
            means 0, so that runs are reproducible by default.
        draft_top_k, draft_top_p: truncate q_draft to its top-k / top-p support; the
            truncated Q is what drafts are sampled from and what is stored (sparsely) for
            verification (Sec. 3.2, last paragraph).  Ignored when greedy.
        ablation: ``None``, or a deliberately wrong variant for negative controls
            (:data:`spec_lib.schedules.ablations.ABLATIONS`).
        drafter: the separate drafter of ``deer`` (a diffusion drafter) or ``ar_draft``
            (an AR drafter), from :mod:`spec_lib.drafters`; None for the other schedules.
            Its calls are reported in ``extras`` as ``drafter_nfe``, ``drafter_seconds``
            and ``drafter_rows_per_call``; ``nfe`` counts target calls, ``model_seconds``
            both models' forward time.

    Returns:
        :class:`DecodeResult` with ``tokens, nfe, accepted, rows_per_call,
        model_seconds, wall_seconds``.

    Raises:
        ValueError: on any invalid argument, before any model call (TypeError for a model
            that does not implement :class:`spec_lib.models.SpecModel`).
    """
    started = time.perf_counter()
    (prompt,) = validate(model, [prompt_ids], schedule=schedule, schedules=SCHEDULE_SPECS, width=width,
                         max_new_tokens=max_new_tokens, temperature=temperature, eos_token_id=eos_token_id,
                         seed=seed, draft_top_k=draft_top_k, draft_top_p=draft_top_p, drafter=drafter)
    dec = Decoding(model, prompt, width=int(width), max_new_tokens=int(max_new_tokens),
                   temperature=float(temperature), eos_token_id=None if eos_token_id is None else int(eos_token_id),
                   seed=None if seed is None else int(seed), draft_top_k=draft_top_k, draft_top_p=draft_top_p,
                   ablation=ablation, drafter=drafter)
    SCHEDULE_SPECS[schedule].run(dec)
    return dec.result(started)
