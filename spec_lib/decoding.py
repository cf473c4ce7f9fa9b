"""The one public ``decode``: left-to-right schedules (seed 000 Algorithms 1-2, seed 001),
multi-token stop sequences (seed 000, App. E.2), and any-order verification (App. C,
Algorithm 3) on an any-order model.

* ``order=None`` (the default) on a :class:`~spec_lib.models.SpecModel`: the left-to-right
  schedules of :func:`spec_lib.schedules.decode`; with ``stop_sequences``, the same loop
  stopping at a marker (:func:`spec_lib.schedules.stops.decode_ltr_with_stops`);
* ``order="ltr" | "confidence" | policy`` (or any call on an any-order model, whose default
  order is ``"ltr"``): :func:`spec_lib.schedules.anyorder.decode_any_order` (greedy), with
  the schedules ``linear``, ``packed``, ``quadratic`` and SetDLM's ``native`` decoder.
"""

from __future__ import annotations

from .schedules import DecodeResult
from .schedules import decode as decode_ltr
from .schedules.anyorder import ANY_ORDER_SEAM, decode_any_order
from .schedules.stops import decode_ltr_with_stops

_ANY_ORDER_ONLY = ("threshold", "trace")


def is_any_order(model) -> bool:
    """Whether ``model`` implements the any-order seam (:mod:`spec_lib.anyorder_models`)."""
    return all(hasattr(model, name) for name in ANY_ORDER_SEAM)


def decode(model, prompt_ids, *, schedule: str, width: int, max_new_tokens: int, order=None,
           stop_sequences=None, **options) -> DecodeResult:
    """Generate after ``prompt_ids`` with one schedule (see the module docstring).

    Args:
        model: a :class:`~spec_lib.models.SpecModel` (left-to-right), or an any-order model
            (:class:`~spec_lib.anyorder_models.AnyOrderLM`, ``ExactAnyOrderLM``).
        prompt_ids, schedule, width, max_new_tokens: as in :func:`spec_lib.schedules.decode`
            (any-order schedules: ``linear``, ``packed``, ``quadratic``, ``native``).
        order: None (left to right, the seed 000 main text), or ``"ltr"``, ``"confidence"``
            or a policy object for any-order verification (App. C; needs an any-order model).
        stop_sequences: token-id lists; a marker stops decoding once all its tokens are
            accepted, and the returned tokens end with it (App. E.2).
        **options: the left-to-right options (``temperature``, ``eos_token_id``, ``seed``,
            ``draft_top_k``, ``draft_top_p``, ``ablation``, ``drafter``) or the any-order
            ones (``eos_token_id``, ``threshold``, ``trace``, ``ablation``).

    Raises:
        ValueError: before any model call, on invalid input; ``order=`` with a model that has
            no any-order mode, and any-order options on a left-to-right decode, included.
    """
    any_order = order is not None or is_any_order(model)
    if any_order:
        if not is_any_order(model):
            raise ValueError(f"order={order!r} needs a model with an any-order mode (spec_lib.anyorder_models."
                             f"AnyOrderLM or ExactAnyOrderLM); {type(model).__name__} has none")
        allowed = {"eos_token_id", "threshold", "trace", "ablation"}
        extra = sorted(set(options) - allowed)
        if extra:
            raise ValueError(f"any-order decoding is greedy and takes only {sorted(allowed)}; got {extra}")
        return decode_any_order(model, prompt_ids, schedule=schedule, width=width, max_new_tokens=max_new_tokens,
                                order="ltr" if order is None else order, stop_sequences=stop_sequences, **options)
    wrong = sorted(set(options) & set(_ANY_ORDER_ONLY))
    if wrong:
        raise ValueError(f"{wrong} apply to any-order decoding only (pass order= and an any-order model)")
    if stop_sequences is not None:
        if "ablation" in options:
            raise ValueError("stop_sequences cannot be combined with an ablation")
        return decode_ltr_with_stops(model, prompt_ids, schedule=schedule, width=width,
                                     max_new_tokens=max_new_tokens, stop_sequences=stop_sequences, **options)
    return decode_ltr(model, prompt_ids, schedule=schedule, width=width, max_new_tokens=max_new_tokens, **options)


__all__ = ["decode", "is_any_order"]
