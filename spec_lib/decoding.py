"""The one public decoder: :func:`decode` runs every schedule of the registry
(:data:`spec_lib.schedules.SCHEDULE_SPECS`), left to right or in any order, with or without a
separate drafter; :func:`decode_batch` decodes several prompts together with the same arguments
and the same result per row.

* left to right (seed 000, Algorithms 1-2; seed 001, Sec. 3.4; seed 002): ``ar``, ``linear``,
  ``quadratic``, ``packed``, ``partial`` (``branches=``, seed 000 Sec. 5), ``drafted`` (alias
  ``deer``; a one-step drafter: DEER, DFlash, DEdit, Domino, DSpark) and ``ar_draft``, greedy or
  with exact rejection sampling, with EOS and multi-token stop sequences (App. E.2);
* in any order (App. C, Algorithm 3): ``order="ltr" | "confidence" | policy`` (or any call on an
  any-order model, whose default order is ``"ltr"``) with ``linear``, ``packed``, ``quadratic``
  and SetDLM's ``native`` threshold decoder (``threshold=``), greedy.

Every argument is checked by one validator (:func:`spec_lib.schedules.validation.validate`)
before any model call.
"""

from __future__ import annotations

import time

from .schedules import DecodeResult, Decoding
from .schedules.anyorder import run_any_order
from .schedules.partial import PartialBranchModel
from .schedules.stops import StopSequenceDecoding
from .schedules.validation import is_any_order, validate

#: the options of :func:`decode` that :func:`decode_batch` takes only at these (greedy, left-to-right) values
BATCH_REFUSED = {"temperature": 0.0, "order": None, "stop_sequences": None, "ablation": None, "branches": None,
                 "threshold": None, "trace": False}


def decode(model, prompt_ids, *, schedule: str, width: int, max_new_tokens: int, drafter=None, order=None,
           stop_sequences=None, branches=None, temperature: float = 0.0, eos_token_id: int | None = None,
           seed: int | None = None, draft_top_k: int | None = None, draft_top_p: float | None = None,
           threshold: float | None = None, trace: bool = False, ablation: str | None = None) -> DecodeResult:
    """Generate up to ``max_new_tokens`` tokens after ``prompt_ids`` with one schedule.

    Args:
        model: a :class:`spec_lib.models.SpecModel` (``DualModeLM``, a ``spec_lib.toy`` exact
            model, a compiled ``StaticDualModeLM``, a LoRA drafter's model), or an any-order
            model (:class:`~spec_lib.anyorder_models.AnyOrderLM`, ``ExactAnyOrderLM``).
        prompt_ids: non-empty 1-D sequence of token ids (list, array or tensor; shape
            ``(n,)`` or ``(1, n)``).
        schedule: a name of :data:`spec_lib.schedules.ALL_SCHEDULES` (see the module docstring).
        width: the number of draft tokens per verification, in [1, 1024], for every schedule:
            W of seed 000 (block size B = W + 1), k of seed 001, W - 1 of seed 002 (whose block
            of W starts with the anchor); ignored by ``ar``.
        max_new_tokens: output length limit L >= 0.
        drafter: the separate drafter of ``drafted`` / ``deer`` (a diffusion drafter) and
            ``ar_draft`` (an AR drafter), from :mod:`spec_lib.drafters`, on the target's device;
            None for the other schedules.  Its calls are reported in ``extras`` as
            ``drafter_nfe``, ``drafter_seconds`` and ``drafter_rows_per_call``; ``nfe`` counts
            target calls, ``model_seconds`` both models' forward time.
        order: None (left to right), or ``"ltr"``, ``"confidence"`` or a policy ``(positions,
            scores) -> permutation`` for any-order verification (needs an any-order model).
        stop_sequences: token-id lists; a marker stops decoding once all its tokens are
            accepted, and the returned tokens end with it (App. E.2).
        branches: ``partial`` only: ``"full"`` (default), ``"first:s"``, ``"likely:s"`` or a
            :class:`spec_lib.schedules.branches.BranchPolicy`.
        temperature: 0 for greedy; > 0 samples from the tempered target exactly (the same
            temperature tempers q_draft); left to right only.
        eos_token_id: stop at the first accepted EOS (it is included in ``tokens``).
        seed: seeds the sampling generator (temperature > 0), an int in [0, 2**64); None
            means 0, so that runs are reproducible by default.
        draft_top_k, draft_top_p: truncate q_draft to its top-k / top-p support (Sec. 3.2);
            ignored when greedy.
        threshold: ``native`` only: the confidence threshold (App. E.6: 0.9).
        trace: any-order only: record each iteration's order, kappa, h, A_t and next draft
            in ``extras["trace"]``.
        ablation: None, or a deliberately wrong variant for negative controls (each
            schedule's ``ablations`` in the registry; any-order: the masks'
            :data:`spec_lib.masks.anyorder.ABLATIONS`).

    Returns:
        :class:`~spec_lib.schedules.state.DecodeResult` with ``tokens, nfe, accepted,
        rows_per_call, model_seconds, wall_seconds`` and ``extras``.

    Raises:
        ValueError: on any invalid argument, before any model call (TypeError for a model
            that implements neither :class:`spec_lib.models.SpecModel` nor the any-order seam).
    """
    started = time.perf_counter()
    request = validate(model, [prompt_ids], schedule=schedule, width=width, max_new_tokens=max_new_tokens,
                       temperature=temperature, eos_token_id=eos_token_id, seed=seed, draft_top_k=draft_top_k,
                       draft_top_p=draft_top_p, drafter=drafter, order=order, stop_sequences=stop_sequences,
                       branches=branches, threshold=threshold, trace=trace, ablation=ablation)
    spec, (prompt,) = request.schedule, request.prompts
    eos = None if eos_token_id is None else int(eos_token_id)
    if request.any_order:
        return run_any_order(model, prompt, schedule=spec.name, width=request.width,
                             max_new_tokens=request.max_new_tokens, order=request.order, eos_token_id=eos,
                             stops=request.stops, threshold=request.threshold, trace=trace, ablation=ablation,
                             started=started)
    options = dict(width=request.width, max_new_tokens=request.max_new_tokens, temperature=float(temperature),
                   eos_token_id=eos, seed=None if seed is None else int(seed), draft_top_k=draft_top_k,
                   draft_top_p=draft_top_p, drafter=drafter)
    if request.policy is not None:                                    # partial-branch (seed 000, Sec. 5)
        wrapped = PartialBranchModel(model)
        dec = (StopSequenceDecoding(wrapped, prompt, stop_sequences=request.stops, **options) if request.stops
               else Decoding(wrapped, prompt, **options))
        return dec.result(started, **spec.run(dec, request.policy, ablation))
    if request.stops:
        dec = StopSequenceDecoding(model, prompt, stop_sequences=request.stops, **options)
    else:
        dec = Decoding(model, prompt, ablation=ablation, **options)
    spec.run(dec)
    return dec.result(started)


def decode_batch(model, prompts: list, *, schedule: str, width: int, max_new_tokens: int, drafter=None,
                 eos_token_id: int | None = None, kv_cache: bool = True, **options) -> list[DecodeResult]:
    """Greedy decoding of several prompts together (seed 001, Sec. 4.4 "Batch inference"):
    :func:`decode`'s arguments with ``prompts`` (a non-empty list of token-id sequences, ragged)
    in place of ``prompt_ids``; schedules ``ar`` and ``drafted`` (alias ``deer``).

    Returns one :class:`~spec_lib.schedules.state.DecodeResult` per prompt, as :func:`decode`
    returns for it alone: the same tokens (up to float ties), the same ``nfe`` count (the prompt
    is processed in the first call) and ``accepted`` per iteration; ``wall_seconds`` and
    ``model_seconds`` are the whole batch's, and ``extras["batch"]`` holds the batch's totals
    (``wall_seconds``, ``model_seconds``, ``target_seconds``, ``drafter_seconds``, ``tokens``,
    ``cycles``, ``batch``).  Other options of :func:`decode` (``temperature``,
    ``stop_sequences``, ``ablation``, ...) are refused unless they are their greedy defaults.

    ``kv_cache=False`` is seed 001's Table 5 setting: every call runs each sequence's whole verified
    prefix again (no cache is kept), which changes the cost of a call and nothing else (the same
    tokens, NFE and acceptance).
    """
    from .batch import run_batch

    started = time.perf_counter()
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, (list, tuple)) or not prompts:
        raise ValueError("prompts must be a non-empty list of token-id sequences")
    if not isinstance(kv_cache, bool):
        raise ValueError(f"kv_cache must be True or False, got {kv_cache!r}")
    refused = sorted(name for name, default in BATCH_REFUSED.items() if name in options and options[name] != default)
    if refused:
        raise ValueError(f"decode_batch is greedy and left to right: it takes {refused} only at their defaults "
                         f"{ {name: BATCH_REFUSED[name] for name in refused} }")
    request = validate(model, list(prompts), schedule=schedule, width=width, max_new_tokens=max_new_tokens,
                       eos_token_id=eos_token_id, drafter=drafter, batch=True, prompt_name="prompts[i]", **options)
    return run_batch(model, drafter, request, None if eos_token_id is None else int(eos_token_id), started,
                     kv_cache=kv_cache)


__all__ = ["decode", "decode_batch", "is_any_order"]
