"""The schedules (seed 000, Sec. 3, Algorithms 1-3, Sec. 5; seed 001, Sec. 3.4) and their one
registry, :data:`SCHEDULE_SPECS`; :func:`spec_lib.decode` runs every one of them.

  * ``ar``         plain AR decoding, one token per call (the reference);
  * ``linear``     Linear-SS: draft call + verify call per iteration;
  * ``quadratic``  Quadratic-SS: one call with a draft branch per verification outcome;
  * ``packed``     Packed-SS: one call verifies D_{t-1} and drafts from P_{t-1};
  * ``partial``    partial-branch: Packed-SS's call plus Quadratic-SS's branches for a subset
                   of outcomes (``branches=``; seed 000 Sec. 5's open design);
  * ``drafted``    a separate one-step drafter (DEER, DFlash, DEdit, Domino, DSpark: seed 001,
                   seed 002), then verify; ``deer`` is an alias;
  * ``ar_draft``   a separate AR drafter, k passes (the EAGLE-3 role in seed 001), then verify;
  * ``native``     SetDLM's threshold decoder (App. E.6), any-order only.

``linear``, ``packed``, ``quadratic`` and ``native`` also run under ``order=`` on an any-order
model (App. C, Algorithm 3).  Each record says its calls per steady-state iteration, the drafter
it needs, how far past the prefix its calls reach, the options only it takes and its
deliberately wrong variants (negative controls).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..masks import call_kind
from ..masks.anyorder import ABLATIONS as ANY_ORDER_ABLATIONS
from .ablations import ABLATIONS as LTR_ABLATIONS
from .loops import run_ar, run_drafted, run_linear, run_packed, run_quadratic
from .partial import PARTIAL_ABLATIONS, run_partial
from .state import DecodeResult, Decoding


@dataclass(frozen=True)
class Schedule:
    """One schedule: how it runs and what it needs.

    Attributes:
        name: the ``schedule`` argument of :func:`spec_lib.decode`.
        run: the left-to-right loop over a :class:`Decoding` (None: any-order only).
        calls: call kinds of one steady-state iteration (NFE per iteration = len(calls)).
        drafter: the separate drafter kind it needs (``"diffusion"``, ``"ar"``) or None.
        reach: ``width -> `` how far past the last verified position its calls (the
            target's) place rows.
        any_order: whether it also runs under ``order=`` on an any-order model (App. C).
        options: the options only this schedule takes (``branches``, ``threshold``).
        ablations: its deliberately wrong variants, left to right (negative controls).
        batch: whether :func:`spec_lib.decode_batch` runs it (several prompts in one pass).
    """

    name: str
    run: Callable | None
    calls: tuple[str, ...]
    drafter: str | None
    reach: Callable[[int], int]
    any_order: bool = False
    options: tuple[str, ...] = ()
    ablations: tuple[str, ...] = tuple(a for a in LTR_ABLATIONS if a is not None)
    batch: bool = False


SCHEDULE_SPECS: dict[str, Schedule] = {s.name: s for s in (
    Schedule("ar", run_ar, ("verify",), None, lambda w: 0, batch=True),
    Schedule("linear", run_linear, ("linear_draft", "verify"), None, lambda w: w, any_order=True),
    Schedule("quadratic", run_quadratic, ("quadratic",), None, lambda w: 2 * w + 1, any_order=True),
    Schedule("packed", run_packed, ("packed",), None, lambda w: w, any_order=True),
    Schedule("partial", run_partial, ("partial",), None, call_kind("partial").reach, options=("branches",),
             ablations=tuple(a for a in PARTIAL_ABLATIONS if a is not None)),
    Schedule("drafted", run_drafted, ("verify",), "diffusion", lambda w: w, batch=True),
    Schedule("ar_draft", run_drafted, ("verify",), "ar", lambda w: w),
    Schedule("native", None, ("native",), None, lambda w: w, any_order=True, options=("threshold",), ablations=()),
)}
#: other names of registered schedules (``deer``: seed 001's name for ``drafted``).
ALIASES = {"deer": "drafted"}
#: the deliberately wrong masks of any-order verification (:mod:`spec_lib.masks.anyorder`).
ANY_ORDER_ABLATION_NAMES = tuple(a for a in ANY_ORDER_ABLATIONS if a is not None)

#: Self-speculative left-to-right schedules that need only the model (seed 000).
SCHEDULES = ("ar", "linear", "quadratic", "packed")
#: Schedules that draft with a separate model (aliases included), and the drafter kind each needs.
DRAFTER_SCHEDULES = {**{n: s.drafter for n, s in SCHEDULE_SPECS.items() if s.drafter is not None},
                     **{alias: SCHEDULE_SPECS[name].drafter for alias, name in ALIASES.items()}}
#: Every schedule name :func:`spec_lib.decode` accepts (aliases included).
ALL_SCHEDULES = (*SCHEDULE_SPECS, *ALIASES)


def resolve(schedule) -> Schedule | None:
    """The record of ``schedule`` (a name or an alias), None if there is none."""
    if not isinstance(schedule, str):
        return None
    return SCHEDULE_SPECS.get(ALIASES.get(schedule, schedule))


__all__ = ["ALIASES", "ALL_SCHEDULES", "ANY_ORDER_ABLATION_NAMES", "DRAFTER_SCHEDULES", "SCHEDULES",
           "SCHEDULE_SPECS", "DecodeResult", "Decoding", "Schedule", "resolve"]
