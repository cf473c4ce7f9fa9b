"""A decoding grid over arbitrary runners: notebooks 16 and 17 compare methods that
:func:`spec_lib.studies.bench.run_grid` cannot express (the partial-branch entry point, several
models in one interleaved grid).  Rows have bench's columns, so
:func:`~spec_lib.studies.bench.aggregate`, :func:`~spec_lib.studies.bench.paired_bootstrap` and
:func:`~spec_lib.studies.bench.identity_to_reference` apply.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd
from tqdm.auto import tqdm

from .repetition import repetition_share


@dataclass(frozen=True)
class Runner:
    """One decoding configuration: ``run(prompt, max_new_tokens=..., eos_token_id=...)`` returns a
    :class:`~spec_lib.schedules.DecodeResult`; ``columns`` are copied into each row."""

    name: str
    schedule: str
    width: int
    run: Callable = field(compare=False, repr=False)
    columns: dict = field(default_factory=dict, compare=False)


def run_grid(prompts: dict[str, list[list[int]]], runners: list[Runner], *, max_new_tokens: dict[str, int],
             eos_token_id: int | None = None, progress: bool = True) -> pd.DataFrame:
    """Greedy responses of every runner on every prompt, runners rotated prompt by prompt (slow
    phases of the machine hit all alike), after one short warm-up decode per runner; one row per
    response with bench's columns plus ``branch_hits`` and each runner's ``columns``."""
    jobs = [(name, i, p) for name, items in prompts.items() for i, p in enumerate(items)]
    if not jobs:
        raise ValueError("prompts must hold at least one prompt to decode")
    if not runners:
        raise ValueError("runners must hold at least one runner")
    for runner in runners:
        runner.run(jobs[0][2], max_new_tokens=8, eos_token_id=eos_token_id)
    rows = []
    for job, (name, i, prompt) in enumerate(tqdm(jobs, desc="decoding", disable=not progress)):
        for runner in runners[job % len(runners):] + runners[: job % len(runners)]:
            res = runner.run(prompt, max_new_tokens=max_new_tokens[name], eos_token_id=eos_token_id)
            rows.append({"slice": name, "prompt": i, "sample": 0, "method": runner.name, "schedule": runner.schedule,
                         "width": runner.width, **runner.columns, "tokens": len(res.tokens), "nfe": res.nfe,
                         "wall": res.wall_seconds, "model": res.model_seconds, "iterations": len(res.accepted),
                         "output": tuple(res.tokens), "rows_per_call": res.rows_per_call,
                         "call_seconds": res.extras["call_seconds"], "accepted": tuple(res.accepted),
                         "branch_hits": res.extras.get("branch_hits", 0), "repetition": repetition_share(res.tokens)})
    return pd.DataFrame(rows)
