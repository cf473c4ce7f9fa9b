"""Both execution paths of one model in one timing grid: the eager ``DualModeLM`` and its
compiled static-cache twin (:class:`spec_lib.compiled.StaticDualModeLM`), for the timing
notebooks' ``compiled`` parameter.

Seed 000 models a call as tau + delta n (Sec. 1) and decomposes wall time into model and
non-model time (App. F.3).  A compiled path removes per-call overhead, so it lowers tau more
than delta and rows become relatively dearer; :func:`per_path_costs` fits tau and delta on each
path's own calls and sets Packed-SS against Linear-SS on each, measured, not assumed.
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
from tqdm.auto import tqdm

from .. import masks
from . import bench

__all__ = ["PATHS", "call_rows", "grid_extent", "compiled_twin", "execution_paths", "compiled_drafter",
           "methods_by_path", "drafter_compile_seconds",
           "path_method", "warm_up_paths", "run_paths", "on_path", "acceptance_by_path", "per_path_costs",
           "path_ratios",
           "best_blocks_by_path", "shape_names", "compile_seconds"]

#: the execution paths, the eager one first (its method names carry no suffix)
PATHS = ("eager", "compiled")

def call_rows(method: bench.Method) -> int:
    """Rows of ``method``'s widest steady-state call of the target, at most (its calls' kinds at
    ``m`` = 0 or ``width`` drafts, from the call-kind registry: seed 000, Table 2's Linear-SS
    W + 1 per call, Packed-SS 2(W + 1), Quadratic-SS (W + 1)(W + 2); a drafter schedule's
    verification of k drafts, k + 1)."""
    from ..schedules import ALL_SCHEDULES, resolve

    spec = resolve(method.schedule)
    if spec is None:
        raise ValueError(f"the compiled path runs the schedules {list(ALL_SCHEDULES)}, got {method.schedule!r}")
    w = method.width
    drafts = (0, w) if spec.reach(w) else (0,)          # a schedule reaching no further (AR) drafts nothing
    return max(masks.call_kind(kind).rows(0, m, w) for kind in spec.calls for m in drafts)


def grid_extent(prompts: dict[str, list[list[int]]], max_new_tokens: dict[str, int] | int) -> tuple[int, int]:
    """``(longest prompt, output cap)`` of a grid: with the rows of a call, what a static cache
    must hold."""
    lengths = [len(p) for items in prompts.values() for p in items]
    if not lengths:
        raise ValueError(f"prompts must hold at least one prompt, got {bench.prompt_counts(prompts)}")
    if isinstance(max_new_tokens, dict):
        if set(max_new_tokens) != set(prompts):
            raise ValueError(f"max_new_tokens must name exactly the slices of prompts {sorted(prompts)}, got "
                             f"{sorted(max_new_tokens)}")
        caps = list(max_new_tokens.values())
    else:
        caps = [max_new_tokens]
    if any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in caps):
        raise ValueError(f"max_new_tokens must be an int >= 1 or {{slice: int >= 1}}, got {max_new_tokens!r}")
    return max(lengths), max(caps)


def compiled_twin(model, prompts: dict[str, list[list[int]]], methods: list[bench.Method],
                  max_new_tokens: dict[str, int] | int):
    """A compiled :class:`~spec_lib.compiled.StaticDualModeLM` on ``model``'s weights, its cache
    just long enough for the longest prompt, the output cap and the widest call of ``methods``
    (every call attends over the whole static cache, so a longer one would cost time)."""
    from ..compiled import StaticDualModeLM

    rows = max(call_rows(m) for m in methods)
    longest, cap = grid_extent(prompts, max_new_tokens)
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


def compiled_drafter(drafter, longest_prefix: int, width: int):
    """The compiled static-shape twin of a separate drafter (:mod:`spec_lib.compiled.drafters`)
    on the same weights, for drafts of at most ``width`` tokens after prefixes of at most
    ``longest_prefix`` tokens: DEER's diffusion drafter reading the same context (the whole
    prefix when the eager one reads it all), the AR drafter with the K/V slots it needs
    (``positions_needed``).  Other drafters are refused with their type named."""
    from ..compiled.drafters import StaticARDrafter, StaticDiffusionDrafter
    from ..drafters.autoregressive import ARDrafter
    from ..drafters.diffusion import DiffusionDrafter

    if type(drafter) is DiffusionDrafter:
        context = drafter.context if drafter.context is not None else longest_prefix
        if drafter.max_positions is not None:            # room for SEP and a MASK after the context
            context = min(context, drafter.max_positions - 2)
        return StaticDiffusionDrafter(drafter.hf_model, drafter.mask_token_id, drafter.sep_token_id, context,
                                      compile=True)
    if type(drafter) is ARDrafter:
        return StaticARDrafter(drafter.hf_model, max_cache_len=drafter.positions_needed(longest_prefix, width),
                               compile=True)
    raise ValueError(f"the compiled path has twins of DiffusionDrafter and ARDrafter, got {type(drafter).__name__}")


def methods_by_path(models: dict, methods: list[bench.Method], prompts: dict[str, list[list[int]]],
                    max_new_tokens: dict[str, int] | int) -> dict[str, list[bench.Method]]:
    """``{path: methods}`` for :func:`run_paths`: ``methods`` on the eager path; on the compiled
    path the same methods (same names) with each separate drafter replaced by its
    :func:`compiled_drafter` (one twin per drafter, shared by the methods that share it), so the
    whole decode (target and drafter) runs compiled."""
    longest, cap = grid_extent(prompts, max_new_tokens)
    drafters = {id(m.drafter): m.drafter for m in methods if m.drafter is not None}
    widest = {key: max(m.width for m in methods if m.drafter is d) for key, d in drafters.items()}
    twins = {key: compiled_drafter(d, longest + cap - 1, widest[key]) for key, d in drafters.items()}
    return {path: list(methods) if path == PATHS[0] else
            [m if m.drafter is None else replace(m, drafter=twins[id(m.drafter)]) for m in methods]
            for path in models}


def drafter_compile_seconds(methods: list[bench.Method]) -> dict[str, dict[str, float]]:
    """``{method names: {"<shape>": seconds}}``: the compiling calls of each compiled drafter,
    once per drafter, under the names of the methods that share it (joined by ", "); methods
    without a compiled drafter are left out."""
    names: dict[int, list[str]] = {}
    drafters = {}
    for m in methods:
        if m.drafter is not None and getattr(m.drafter, "compiled", False):
            names.setdefault(id(m.drafter), []).append(m.name)
            drafters[id(m.drafter)] = m.drafter
    return {", ".join(names[key]): shape_names(d.compile_seconds) for key, d in drafters.items()}


def warm_up_paths(models: dict, methods: dict[str, list[bench.Method]], prompts: dict[str, list[list[int]]],
                  max_new_tokens: dict[str, int] | int, seed: int = 0) -> None:
    """Before a timed grid: every method on every path decodes the first prompt of each slice to
    that slice's cap (``max_new_tokens``: one cap, or one per slice), without stopping at EOS,
    and every prefix length a compiled diffusion drafter can meet is compiled, so that no shape
    is compiled inside a timed response.  (An 8-token warm-up left Linear-SS's steady draft call
    to the first timed decode that made a second iteration.)"""
    from ..decoding import decode

    grid_extent(prompts, max_new_tokens)                  # a clear error for no prompts or a bad cap
    if not isinstance(max_new_tokens, dict):
        max_new_tokens = dict.fromkeys(prompts, max_new_tokens)
    if set(methods) != set(models):
        raise ValueError(f"methods must have one list per path of {sorted(models)}, got {sorted(methods)}")
    for path, model in models.items():
        _warm_drafters(methods[path])
        for name, items in prompts.items():
            if not items:
                continue
            for method in methods[path]:
                decode(model, items[0], schedule=method.schedule, width=method.width,
                       max_new_tokens=max_new_tokens[name], temperature=0.0, seed=seed, drafter=method.drafter)


def _warm_drafters(methods: list[bench.Method]) -> None:
    """Compile every padded prefix length a compiled diffusion drafter can meet
    (:meth:`~spec_lib.compiled.drafters.StaticDiffusionDrafter.compile_buckets`), so no compile
    lands in a timed decode; the AR drafter's one shape is compiled by the warm-up decode."""
    from ..compiled.drafters import StaticDiffusionDrafter

    for method in methods:
        if isinstance(method.drafter, StaticDiffusionDrafter):
            method.drafter.compile_buckets(method.width)


def path_method(name: str, path: str) -> str:
    """A method's name on ``path``: as is on the eager path, ``"<name> (<path>)"`` otherwise."""
    return name if path == PATHS[0] else f"{name} ({path})"


def run_paths(models: dict, prompts: dict[str, list[list[int]]], methods: list[bench.Method] | dict, *,
              max_new_tokens: dict[str, int] | int, eos_token_id: int | None = None, seed: int = 0,
              progress: bool = True, client=None) -> pd.DataFrame:
    """:func:`spec_lib.studies.bench.run_grid` (greedy) over several execution paths of the same
    weights, interleaved: every prompt is decoded by every method on every path, the order of
    paths and of methods rotated prompt by prompt, so slow phases of the machine hit both
    paths alike.  Each path is warmed up first (:func:`warm_up_paths`: on the compiled path this
    compiles every steady-state shape, so no compile time lands in a timed response).  Rows as
    ``run_grid``'s plus ``path``; method names carry the path (:func:`path_method`).  ``methods`` is one list
    for every path, or ``{path: methods}`` with the same names on every path
    (:func:`methods_by_path`: each path's own drafters).

    ``client`` (a Dask client, :func:`spec_lib.studies.fanout.connect`) fans the grid out as
    ``run_grid`` does, for the eager path alone (compiled graphs live in the process that
    compiled them); the workers then warm up as ``run_grid``'s do, not with
    :func:`warm_up_paths`, which only matters for a compiled path."""
    if not models or set(models) - set(PATHS):
        raise ValueError(f"models must map some of {PATHS} to models, got {sorted(models)}")
    if not isinstance(methods, dict):
        methods = dict.fromkeys(models, list(methods))
    if set(methods) != set(models) or len({tuple(m.name for m in ms) for ms in methods.values()}) != 1:
        raise ValueError(f"methods must be one list, or one per path of {sorted(models)} with the same names, got "
                         f"{ {path: [m.name for m in ms] for path, ms in methods.items()} }")
    if client is not None and set(models) != {PATHS[0]}:
        raise ValueError(f"a client fans out the eager path only (compiled graphs stay in the process that compiled "
                         f"them), got paths {sorted(models)}: decode here (client=None, cluster='') or leave the "
                         f"compiled path out (compiled=False)")
    grid_extent(prompts, max_new_tokens)                  # a clear error for no prompts or a bad cap
    if not isinstance(max_new_tokens, dict):
        max_new_tokens = dict.fromkeys(prompts, max_new_tokens)
    if client is not None:
        return bench.run_grid(models[PATHS[0]], prompts, methods[PATHS[0]], max_new_tokens=max_new_tokens,
                              temperature=0.0, eos_token_id=eos_token_id, seed=seed, progress=progress,
                              client=client).assign(path=PATHS[0])
    settings = {"max_new_tokens": max_new_tokens, "temperature": 0.0, "eos_token_id": eos_token_id, "seed": seed}
    jobs = [(name, i, 0, items[i]) for name, items in prompts.items() for i in range(len(items))]
    warm_up_paths(models, methods, prompts, max_new_tokens, seed)
    paths = list(models)
    rows = []
    for job, spec in enumerate(tqdm(jobs, desc="decoding", disable=not progress)):
        for path in paths[job % len(paths):] + paths[:job % len(paths)]:
            rows += [{**row, "method": path_method(row["method"], path), "path": path}
                     for row in bench.job_rows(models[path], methods[path], job, spec, settings)]
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


def _eager_first(runs: pd.DataFrame) -> list[str]:
    """The paths of ``runs`` in the order met, the eager one (the baseline) first."""
    paths = list(dict.fromkeys(runs["path"]))
    return sorted(paths, key=lambda path: path != PATHS[0])


def acceptance_by_path(runs: pd.DataFrame) -> pd.DataFrame:
    """Per slice and method: do the paths draft alike?  Greedy outputs equal AR's whatever the
    drafts (verification corrects any draft), so a wrong compiled drafter shows only in
    acceptance: the share of responses whose accepted lengths, iteration by iteration, are the
    same on each later path as on the eager one (below 1 only where a float tie flips a
    draft), and tokens per iteration on each path."""
    paths = _eager_first(runs)
    key = ["slice", "prompt", "sample", "method"]
    columns = key + ["accepted", "tokens", "iterations"]
    eager = on_path(runs, paths[0])[columns]
    out = []
    for path in paths[1:]:
        both = eager.merge(on_path(runs, path)[columns], on=key, suffixes=("", "_path"))
        both["same"] = [a == b for a, b in zip(both["accepted"], both["accepted_path"])]
        for (name, method), part in both.groupby(["slice", "method"], sort=False):
            out.append({"slice": name, "method": method, "path": path, "responses": len(part),
                        "same_acceptance": float(part["same"].mean()),
                        "tokens_per_iteration_eager": part["tokens"].sum() / part["iterations"].sum(),
                        "tokens_per_iteration_path": part["tokens_path"].sum() / part["iterations_path"].sum()})
    return pd.DataFrame(out, columns=["slice", "method", "path", "responses", "same_acceptance",
                                      "tokens_per_iteration_eager", "tokens_per_iteration_path"])


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
    paths = _eager_first(runs)
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
