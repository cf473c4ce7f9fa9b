"""Evaluation slices: the training data's (code, packages, stdlib, math, copy) and seed 002's
Reasoning and Summary slices built from local text.

Reference: seed 002 (DEdit), Sec. 5.2 and App. A.2-A.4: besides its seven suites it measures
"Reasoning and Summary slices of a visible solution and its summary" (GSM8K-derived, the
target's own reasoning followed by a summary of it), where much of the output is determined by
text already visible.  Here (no GSM8K, no network) both come from the held-out synthetic word
problems of :func:`spec_lib.training.data.math_problems` (a seed range no other slice uses):

* ``reasoning``: a multi-step problem (a worked solution of two or more steps), prompted with
  its question; the real continuation is the worked solution and its answer line;
* ``summary``: the same kind of problem with its question *and* worked solution visible,
  prompted for the answer line that sums the solution up (``#### <answer>``): the
  frozen-reasoning summary continuation of seed 002, App. A.2.

Kept apart from :mod:`spec_lib.training.data` so that adding a slice does not change what the
models were trained on (that module is in the trained checkpoints' keys).
"""

from __future__ import annotations

from ..training import data

#: slices of this module; the others are :data:`spec_lib.training.data.SLICES`
EXTRA = ("reasoning", "summary")
SLICES = (*data.SLICES, *EXTRA)
_SEED_OFFSET = 30_000            # held-out problems: training uses seeds near 0, the math slice 10_000 + seed


def _multi_step(n: int, seed: int) -> list:
    """``n`` word problems whose worked solution takes two or more steps (two or more '=')."""
    found, batch = [], 0
    while len(found) < n:
        problems = data.math_problems(max(4 * n, 64), seed=_SEED_OFFSET + seed + 7919 * batch)
        found += [p for p in problems if p.solution.count("=") >= 2]
        batch += 1
    return found[:n]


def eval_examples(name: str, n: int | None = None, seed: int = 0) -> list:
    """Prompts and real continuations of slice ``name`` (:data:`SLICES`; ``n`` of them, 100 when None)."""
    if name not in SLICES:
        raise ValueError(f"slice must be one of {list(SLICES)}, got {name!r}")
    if name not in EXTRA:
        return data.eval_examples(name, n, seed)
    problems = _multi_step(n or 100, seed)
    if name == "reasoning":
        return [data.EvalExample(p.prompt(), f" {p.solution} #### {p.answer}\n") for p in problems]
    return [data.EvalExample(f"{p.prompt()} {p.solution}", f" #### {p.answer}\n") for p in problems]


def eval_slice(name: str, n: int | None = None, seed: int = 0) -> list[str]:
    """The prompts of slice ``name`` (:func:`eval_examples`)."""
    return [e.prompt for e in eval_examples(name, n, seed)]
