"""Both execution paths of one model in one timing grid: the eager ``DualModeLM`` and its
compiled static-cache twin (:class:`spec_lib.compiled.StaticDualModeLM`), for the timing
notebooks' ``compiled`` parameter.

Seed 000 models a call as tau + delta n (Sec. 1) and decomposes wall time into model and
non-model time (App. F.3).  A compiled path removes per-call overhead, so it lowers tau more
than delta and rows become relatively dearer; :func:`per_path_costs` fits tau and delta on each
path's own calls and sets Packed-SS against Linear-SS on each, measured, not assumed.
"""

from __future__ import annotations

import pandas as pd
from tqdm.auto import tqdm

from .. import masks
from . import bench

__all__ = ["PATHS", "call_rows", "compiled_twin", "execution_paths", "path_method", "run_paths", "on_path",
           "per_path_costs", "path_ratios", "best_blocks_by_path", "shape_names", "compile_seconds"]

#: the execution paths, the eager one first (its method names carry no suffix)
PATHS = ("eager", "compiled")

def call_rows(method: bench.Method) -> int:
    """Rows of ``method``'s widest steady-state call, at most (its calls' kinds at ``m`` = 0 or
    ``width`` drafts, from the call-kind registry: seed 000, Table 2's Linear-SS W + 1 per call,
    Packed-SS 2(W + 1), Quadratic-SS (W + 1)(W + 2))."""
    from ..schedules import SCHEDULE_SPECS

    spec = SCHEDULE_SPECS.get(method.schedule)
    if spec is None or spec.drafter is not None:
        runs = sorted(name for name, s in SCHEDULE_SPECS.items() if s.drafter is None)
        raise ValueError(f"the compiled path runs the schedules {runs}, got {method.schedule!r}")
    w = method.width
    drafts = (0, w) if spec.reach(w) else (0,)          # a schedule reaching no further (AR) drafts nothing
    return max(masks.call_kind(kind).rows(0, m, w) for kind in spec.calls for m in drafts)


def compiled_twin(model, prompts: dict[str, list[list[int]]], methods: list[bench.Method],
                  max_new_tokens: dict[str, int] | int):
    """A compiled :class:`~spec_lib.compiled.StaticDualModeLM` on ``model``'s weights, its cache
    just long enough for the longest prompt, the output cap and the widest call of ``methods``
    (every call attends over the whole static cache, so a longer one would cost time)."""
    from ..compiled import StaticDualModeLM

    rows = max(call_rows(m) for m in methods)
    longest = max(len(p) for items in prompts.values() for p in items)
    cap = max(max_new_tokens.values()) if isinstance(max_new_tokens, dict) else max_new_tokens
    slots = longest + cap + rows + 1
    if model.max_positions is not None and slots > model.max_positions:
        raise ValueError(f"the compiled path needs {slots} cache slots (longest prompt {longest} + max_new_tokens "
                         f"{cap} + {rows} rows of the widest call + 1), more than the model's "
                         f"max_position_embeddings ({model.max_positions}): use shorter prompts, a smaller "
                         f"max_new_tokens or narrower widths")
    return StaticDualModeLM(model.hf_model, model.mask_token_id, max_cache_len=slots, compile=True)


def execution_paths(model, compiled: bool, prompts: dict[str, list[list[int]]], methods: list[bench.Method],
                    max_new_tokens: dict[str, int] | int) -> dict:
    """``{"eager": model}``, with its :func:`compiled_twin` as ``"compiled"`` when ``compiled``."""
    if not isinstance(compiled, bool):
        raise TypeError(f"compiled must be a bool, got {compiled!r}")
    if not compiled:
        return {PATHS[0]: model}
    return {PATHS[0]: model, PATHS[1]: compiled_twin(model, prompts, methods, max_new_tokens)}


def path_method(name: str, path: str) -> str:
    """A method's name on ``path``: as is on the eager path, ``"<name> (<path>)"`` otherwise."""
    return name if path == PATHS[0] else f"{name} ({path})"


def run_paths(models: dict, prompts: dict[str, list[list[int]]], methods: list[bench.Method], *,
              max_new_tokens: dict[str, int] | int, eos_token_id: int | None = None, seed: int = 0,
              progress: bool = True) -> pd.DataFrame:
    """:func:`spec_lib.studies.bench.run_grid` (greedy) over several execution paths of the same
    weights, interleaved: every prompt is decoded by every method on every path, the order of
    paths and of methods rotated prompt by prompt, so slow phases of the machine hit both
    paths alike.  Each path is warmed up first (on the compiled path this compiles every
    steady-state shape, so no compile time lands in a timed response).  Rows as ``run_grid``'s
    plus ``path``; method names carry the path (:func:`path_method`)."""
    if not models or set(models) - set(PATHS):
        raise ValueError(f"models must map some of {PATHS} to models, got {sorted(models)}")
    if not isinstance(max_new_tokens, dict):
        max_new_tokens = dict.fromkeys(prompts, max_new_tokens)
    settings = {"max_new_tokens": max_new_tokens, "temperature": 0.0, "eos_token_id": eos_token_id, "seed": seed}
    jobs = [(name, i, 0, items[i]) for name, items in prompts.items() for i in range(len(items))]
    if not jobs:
        raise ValueError(f"prompts must hold at least one prompt to decode, got {bench.prompt_counts(prompts)}")
    for model in models.values():
        bench.warm_up(model, methods, jobs[0][3], settings)
    paths = list(models)
    rows = []
    for job, spec in enumerate(tqdm(jobs, desc="decoding", disable=not progress)):
        for path in paths[job % len(paths):] + paths[:job % len(paths)]:
            rows += [{**row, "method": path_method(row["method"], path), "path": path}
                     for row in bench.job_rows(models[path], methods, job, spec, settings)]
    return pd.DataFrame(rows)


def on_path(runs: pd.DataFrame, path: str) -> pd.DataFrame:
    """The rows of one path with the method names it had in a one-path grid, so every
    :mod:`~spec_lib.studies.bench` analysis applies to it unchanged."""
    if path not in set(runs["path"]):
        raise ValueError(f"path must be one of {sorted(set(runs['path']))}, got {path!r}")
    part = runs[runs["path"] == path].copy()
    suffix = f" ({path})" if path != PATHS[0] else ""
    part["method"] = [m[: len(m) - len(suffix)] if suffix and m.endswith(suffix) else m for m in part["method"]]
    return part


def best_blocks_by_path(runs: pd.DataFrame, n_resamples: int, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Seed 000, App. F.1's block-size probe on each path: ``(probe, speedups)``, the
    :func:`~spec_lib.studies.bench.block_probe` of every method and, at each schedule's best
    block size on that path, its paired-bootstrap speedup over the same path's AR per slice;
    both with a ``path`` column (method names as in a one-path grid)."""
    probes, speedups = [], []
    for path in dict.fromkeys(runs["path"]):
        part = on_path(runs, path)
        probe = bench.block_probe(part)
        best = bench.best_per_schedule(probe)
        ratios = bench.paired_bootstrap(part, "ar", methods=list(best["method"]), n_resamples=n_resamples, seed=seed)
        ratios["B"] = ratios["method"].map(dict(zip(best["method"], best["B"])))
        probes.append(probe.assign(path=path))
        speedups.append(ratios.assign(path=path))
    return pd.concat(probes, ignore_index=True), pd.concat(speedups, ignore_index=True)


def per_path_costs(runs: pd.DataFrame, method: str, baseline: str) -> pd.DataFrame:
    """Per path: tau and delta fitted on the path's own steady-state calls of ``method`` and
    ``baseline`` (:func:`spec_lib.studies.bench.cost_model_check`), tau/delta in rows, and the
    cost model's predicted ``method / baseline`` throughput ratio beside the observed one."""
    out = []
    for path, part in runs.groupby("path", sort=False):
        check = bench.cost_model_check(part, path_method(method, path), path_method(baseline, path))
        out.append({"path": path, "method": method, "baseline": baseline, "tau_ms": check["tau_ms"],
                    "delta_ms": check["delta_ms"], "tau_over_delta": check["tau_ms"] / check["delta_ms"],
                    "tokens_per_nfe_ratio": check["tokens_per_nfe_ratio"],
                    "predicted_throughput_ratio": check["predicted_throughput_ratio"],
                    "observed_throughput_ratio": check["observed_throughput_ratio"],
                    "relative_error": check["relative_error"]})
    return pd.DataFrame(out)


def path_ratios(runs: pd.DataFrame, method: str, baseline: str, n_resamples: int, seed: int = 0) -> pd.DataFrame:
    """Paired bootstrap ratios per slice (:func:`spec_lib.studies.bench.paired_bootstrap`, CIs
    over prompts) of ``method`` over ``baseline`` on each path, and of every method on each
    later path over the same method on the eager path; ``comparison`` names the pair."""
    paths = list(dict.fromkeys(runs["path"]))
    kw = {"n_resamples": n_resamples, "seed": seed}
    parts = [bench.paired_bootstrap(runs, path_method(baseline, path), methods=[path_method(method, path)], **kw)
             .assign(comparison=f"{method} / {baseline}", path=path) for path in paths]
    eager = list(dict.fromkeys(runs.loc[runs["path"] == paths[0], "method"]))
    parts += [bench.paired_bootstrap(runs, name, methods=[path_method(name, path)], **kw)
              .assign(comparison=f"{path} / {paths[0]}", path=path) for path in paths[1:] for name in eager]
    return pd.concat(parts, ignore_index=True)


def shape_names(seconds: dict[tuple, float]) -> dict[str, float]:
    """``{"<call kind>:<rows>": seconds}`` of compile times keyed by shape tuples."""
    return {":".join(map(str, shape)): s for shape, s in seconds.items()}


def compile_seconds(models: dict) -> dict[str, float]:
    """``{"<call kind>:<rows>": seconds}`` of the compiled path's compiling calls; empty
    without one."""
    compiled = models.get(PATHS[1])
    return {} if compiled is None else shape_names(compiled.compile_seconds)
