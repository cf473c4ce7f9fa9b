"""Studies behind notebook 16: the partial-branch schedule between Packed-SS and Quadratic-SS.

The design is seed 000's open question (Sec. 5); :mod:`spec_lib.schedules.partial` builds it.

* :func:`layout_table`: rows per call from the builders, against 2B + |S| B.
* :func:`pathwise_study`: the real decoders on :class:`~spec_lib.toy.ScriptedDrafterLM`
  drafters that satisfy Assumption 3.1 (threshold generators of notebook 02): how often
  partial-branch needs more forward passes than Packed-SS to reach some length L;
  :func:`counterexample_search` repeats it on arbitrary correctness tables (the assumption
  dropped) and keeps the smallest instance where partial-branch loses, if any.
* :func:`sample_partial` / :func:`exactness_fits`: exact rejection sampling, chi-square and
  G-tests against the enumerated law of a ``MarkovLM`` (as notebook 03), with the
  ``branch_argmax`` negative control.
* :func:`run_grid`: responses of AR, Packed-SS, Quadratic-SS and partial-branch policies on the
  trained model, rows in the format of :func:`spec_lib.studies.bench.run_grid` (so
  :func:`~spec_lib.studies.bench.aggregate` and the paired bootstrap apply).
* :func:`predicted_time_per_nfe` / :func:`regime_map`: the cost model tau + delta n (timed
  calls, and the run's own calls, :func:`steady_calls`) beside the measurements, and which
  schedule the measured tokens/NFE make fastest at each tau/delta.
"""

from __future__ import annotations

import functools
import multiprocessing as mp
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from .. import masks
from ..masks.partial import partial_layout
from ..decoding import decode
from ..schedules.branches import branch_policy
from ..toy import MarkovLM, ScriptedDrafterLM
from . import grid, sim
from .dominance import nfe_to_reach
from .exactness import goodness_of_fit, stopped_law


# ----- layouts -------------------------------------------------------------------------------------

def full_set(width: int) -> tuple[int, ...]:
    """S = {W}: the branch for a fully accepted full-width draft."""
    return (width,)


def first_set(size: int):
    """``width -> (0, ..., size - 1)``."""
    return lambda width: tuple(range(size))


def layout_table(blocks, branch_sets) -> pd.DataFrame:
    """Rows of one call from the builders for Packed-SS, Quadratic-SS and partial-branch with
    each branch set (a full draft, m = W), beside the formula 2B + |S| B."""
    rows = []
    empty, last = torch.empty(0, dtype=torch.long), torch.tensor([1])
    for block in blocks:
        width = block - 1
        draft = torch.arange(2, 2 + width)
        for kind in ("packed", "quadratic"):
            lay = masks.build_layout(kind, context=empty, last=last, draft=draft, width=width, mask_token_id=0,
                                     start=10)
            rows.append({"B": block, "schedule": kind, "branches": "-", "n_branches": 0 if kind == "packed" else block,
                         "rows": lay.rows, "formula": 2 * block if kind == "packed" else block * (block + 1)})
        for name, make in branch_sets.items():
            branches = tuple(k for k in make(width) if k <= width)
            lay = partial_layout(branches, context=empty, last=last, draft=draft, width=width, mask_token_id=0,
                                 start=10)
            rows.append({"B": block, "schedule": "partial", "branches": name, "n_branches": len(branches),
                         "rows": lay.rows, "formula": 2 * block + len(branches) * block})
    return pd.DataFrame(rows)


# ----- pathwise comparison with Packed-SS (Assumption 3.1) ---------------------------------------------

def _nfe_curves(model, prompt, width, length, policies) -> dict[str, np.ndarray]:
    """NFE needed to reach L = 1..length tokens, per method, and the outputs' agreement."""
    packed = decode(model, prompt, schedule="packed", width=width, max_new_tokens=length)
    out = {"packed": nfe_to_reach(packed.accepted, 1, length)}
    for policy in policies:
        res = decode(model, prompt, schedule="partial", width=width, max_new_tokens=length, branches=policy)
        if res.tokens != packed.tokens:
            raise AssertionError(f"partial ({policy}) and packed outputs differ on a greedy scripted model")
        out[policy] = nfe_to_reach(res.accepted, 1, length)
    return out


def pathwise_study(widths, policies, instances: int, length: int, seed: int = 0, progress: bool = True
                   ) -> pd.DataFrame:
    """Partial-branch against Packed-SS on drafters satisfying Assumption 3.1.

    One row per (generator, W, policy): instances, (instance, L) pairs where partial needs
    more passes than Packed-SS (``violations``), instances where it needs fewer for some L,
    and the median ratio of passes to reach ``length`` tokens.
    """
    rng = np.random.default_rng(seed)
    prompt = [1, 2, 3]
    rows = []
    grid = [(name, w) for w in widths for name in sim.GENERATORS]
    for name, width in tqdm(grid, desc="pathwise instances", disable=not progress):
        size = length + 2 * width + 3
        thresholds = sim.GENERATORS[name](instances, size + 1, width, rng)
        stats = {p: {"violations": 0, "better": 0, "ratio": []} for p in policies}
        for i in range(instances):
            model = ScriptedDrafterLM(rng.integers(1, 16, size), 16, len(prompt), thresholds=thresholds[i])
            curves = _nfe_curves(model, prompt, width, length, policies)
            for p in policies:
                stats[p]["violations"] += int((curves[p] > curves["packed"]).sum())
                stats[p]["better"] += int((curves[p] < curves["packed"]).any())
                stats[p]["ratio"].append(curves[p][-1] / curves["packed"][-1])
        for p in policies:
            rows.append({"generator": name, "width": width, "policy": p, "instances": instances,
                         "violations": stats[p]["violations"], "instances_better": stats[p]["better"],
                         "nfe_ratio_median": float(np.median(stats[p]["ratio"])),
                         "nfe_ratio_min": float(np.min(stats[p]["ratio"]))})
    return pd.DataFrame(rows)


@dataclass
class Counterexample:
    """An instance where partial-branch needs more passes than Packed-SS to reach ``length_at``."""

    width: int
    policy: str
    length_at: int
    nfe_partial: int
    nfe_packed: int
    table: np.ndarray          # (K + 1, K + 1) correctness table[k, c]
    satisfies_assumption: bool


def counterexample_search(widths, policies, instances: int, length: int, p_correct: float = 0.6, seed: int = 0,
                          progress: bool = True) -> tuple[pd.DataFrame, Counterexample | None]:
    """Random correctness tables (each entry correct with ``p_correct``, Assumption 3.1 not
    imposed): per (W, policy) the share of instances where partial-branch loses to Packed-SS
    at some L, and the first losing instance of the smallest W and L found."""
    rng = np.random.default_rng(seed)
    prompt = [1, 2, 3]
    rows, best = [], None
    for width in tqdm(list(widths), desc="counterexample search", disable=not progress):
        size = length + 2 * width + 3
        losses = dict.fromkeys(policies, 0)
        for _ in range(instances):
            table = rng.random((size + 1, size + 1)) < p_correct
            model = ScriptedDrafterLM(rng.integers(1, 16, size), 16, len(prompt), table=table)
            curves = _nfe_curves(model, prompt, width, length, policies)
            for p in policies:
                worse = np.flatnonzero(curves[p] > curves["packed"])
                if worse.size:
                    losses[p] += 1
                    at = int(worse[0]) + 1
                    if best is None or (width, at) < (best.width, best.length_at):
                        best = Counterexample(width, p, at, int(curves[p][at - 1]), int(curves["packed"][at - 1]),
                                              table, not bool(sim.violates_assumption(table[None])[0]))
        rows += [{"width": width, "policy": p, "instances": instances, "instances_partial_loses": losses[p]}
                 for p in policies]
    return pd.DataFrame(rows), best


def counterexample_summary(found: Counterexample | None) -> dict | None:
    """The JSON-able part of a :class:`Counterexample` (the table's cells a decode can reach:
    position k from context c with k - 2W - 1 <= c < k, as lists of correct (k, c) pairs)."""
    if found is None:
        return None
    k, c = np.nonzero(found.table)
    reach = (c < k) & (k - c <= 2 * found.width + 1) & (k <= found.length_at + 2 * found.width + 1)
    return {"width": found.width, "policy": found.policy, "length": found.length_at,
            "nfe_partial": found.nfe_partial, "nfe_packed": found.nfe_packed,
            "satisfies_assumption": found.satisfies_assumption,
            "correct_cells": [[int(a), int(b)] for a, b in zip(k[reach], c[reach])]}


def is_counterexample(found: Counterexample | None) -> bool:
    """A found instance where partial-branch needs more passes than Packed-SS."""
    return found is not None and found.nfe_partial > found.nfe_packed


# ----- exact sampling ----------------------------------------------------------------------------------

def _sample_chunk(args) -> Counter:
    toy_kwargs, prompt, seeds, kwargs = args
    torch.set_num_threads(1)
    toy = MarkovLM(**toy_kwargs)
    return Counter(tuple(decode(toy, prompt, schedule="partial", seed=s, **kwargs).tokens) for s in seeds)


def sample_partial(toy_kwargs: dict, prompt: list[int], n: int, *, seed: int = 0, workers: int = 2,
                   **kwargs) -> Counter:
    """Counts of ``decode(MarkovLM(**toy_kwargs), prompt, schedule="partial", seed=s, **kwargs)`` for n seeds
    (seed * 10**7 + i; the counts do not depend on ``workers``)."""
    seeds = np.arange(n) + seed * 10_000_000
    chunks = [(toy_kwargs, prompt, part.tolist(), kwargs) for part in np.array_split(seeds, max(1, workers) * 4)]
    if workers <= 1:
        parts = list(map(_sample_chunk, chunks))
    else:
        with ProcessPoolExecutor(workers, mp_context=mp.get_context("fork")) as pool:
            parts = list(pool.map(_sample_chunk, chunks))
    return sum(parts, Counter())


def exactness_configs(n: int, width: int, temperature: float, draft_noise: float, policies, top_k: int = 2,
                      chain_seeds=(0,)) -> list[dict]:
    """Every policy on each chain; the first policy with top-k truncated Q; and the
    ``branch_argmax`` negative control with branches for outcomes 0..W (so branch steps are frequent)."""
    base = dict(width=width, n=n, temperature=temperature, draft_noise=draft_noise)
    configs = [{**base, "branches": p, "chain_seed": c, "sample_seed": 10 * c + i}
               for c in chain_seeds for i, p in enumerate(policies)]
    configs.append({**base, "branches": policies[0], "chain_seed": chain_seeds[0], "sample_seed": 7,
                    "draft_top_k": top_k})
    configs.append({**base, "branches": f"first:{width + 1}", "chain_seed": chain_seeds[0], "sample_seed": 9,
                    "ablation": "branch_argmax"})
    return configs


def exactness_verdicts(fits: pd.DataFrame, alpha_pass: float, alpha_fail: float) -> dict[str, bool]:
    """Correct configurations pass both tests at ``alpha_pass``; negative controls fail both at ``alpha_fail``."""
    correct, controls = fits[fits["role"] == "correct"], fits[fits["role"] == "negative control"]
    return {"sampling_fits_exact_law": bool(len(correct)) and bool(((correct["chi2_p"] > alpha_pass)
                                                                    & (correct["g_p"] > alpha_pass)).all()),
            "negative_control_rejected": bool(len(controls)) and bool(((controls["chi2_p"] < alpha_fail)
                                                                       & (controls["g_p"] < alpha_fail)).all())}


def exactness_fits(configs: list[dict], *, vocab_size: int, eos_token_id: int, prompt: list[int], length: int,
                   workers: int = 2, progress: bool = True) -> pd.DataFrame:
    """Each config (``branches, width, n, temperature, draft_noise, chain_seed, sample_seed``,
    optional ``ablation`` and ``draft_top_k``) sampled and tested against its exact stopped law;
    one row of :func:`~spec_lib.studies.exactness.goodness_of_fit` per config, with ``role``."""
    rows = []
    for cfg in tqdm(configs, desc="sampling configurations", disable=not progress):
        toy_kwargs = dict(vocab_size=vocab_size, seed=cfg["chain_seed"], eos_token_id=eos_token_id,
                          draft_noise=cfg["draft_noise"])
        law = stopped_law(MarkovLM(**toy_kwargs), prompt, length, cfg["temperature"])
        counts = sample_partial(toy_kwargs, prompt, cfg["n"], seed=cfg["sample_seed"], workers=workers,
                                branches=cfg["branches"], width=cfg["width"], max_new_tokens=length,
                                temperature=cfg["temperature"], eos_token_id=eos_token_id,
                                ablation=cfg.get("ablation"), draft_top_k=cfg.get("draft_top_k"))
        rows.append({**{k: cfg.get(k) for k in ("branches", "width", "ablation", "draft_top_k", "temperature",
                                                  "draft_noise", "chain_seed")},
                     "role": "negative control" if cfg.get("ablation") else "correct", **goodness_of_fit(counts, law)})
    return pd.DataFrame(rows)


# ----- speed on the trained model ------------------------------------------------------------------------

@dataclass(frozen=True)
class PartialMethod:
    """A decoding configuration of notebook 16: ``schedule`` (``ar``, ``packed``,
    ``quadratic``, ``partial``) at block size B = width + 1, with a branch policy for partial."""

    schedule: str
    width: int
    branches: str | None = None

    def __post_init__(self) -> None:
        if self.schedule == "partial":
            branch_policy(self.branches)                       # a clear error before any decode

    @property
    def name(self) -> str:
        if self.schedule == "ar":
            return "ar"
        extra = f" {self.branches}" if self.schedule == "partial" else ""
        return f"{self.schedule}{extra} B={self.width + 1}"

    def decode(self, model, prompt, **kwargs):
        branches = {"branches": self.branches} if self.schedule == "partial" else {}
        return decode(model, prompt, schedule=self.schedule, width=self.width, **branches, **kwargs)

    def runner(self, model) -> grid.Runner:
        return grid.Runner(self.name, self.schedule, self.width, functools.partial(self.decode, model),
                           {"branches": self.branches or "-"})


def methods(blocks, quadratic_blocks, policies) -> list[PartialMethod]:
    """AR, Packed-SS at every B, Quadratic-SS at ``quadratic_blocks``, partial-branch per policy and B."""
    out = [PartialMethod("ar", 1)] + [PartialMethod("packed", b - 1) for b in blocks]
    out += [PartialMethod("quadratic", b - 1) for b in quadratic_blocks]
    return out + [PartialMethod("partial", b - 1, p) for b in blocks for p in policies]


def run_grid(model, prompts: dict[str, list[list[int]]], methods_: list[PartialMethod], *,
             max_new_tokens: dict[str, int], eos_token_id: int | None = None, progress: bool = True) -> pd.DataFrame:
    """Greedy responses of every method on every prompt (:func:`spec_lib.studies.grid.run_grid`),
    with a ``branches`` column."""
    return grid.run_grid(prompts, [m.runner(model) for m in methods_], max_new_tokens=max_new_tokens,
                         eos_token_id=eos_token_id, progress=progress)


def call_summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Per method: mean rows per call and median model time per call (prompt calls excluded),
    and the share of iterations whose outcome had a branch."""
    out = []
    for method, group in runs.groupby("method", sort=False):
        rows = np.concatenate([np.asarray(r[1:]) for r in group["rows_per_call"]])
        seconds = np.concatenate([np.asarray(s[1:]) for s in group["call_seconds"]])
        out.append({"method": method, "schedule": group["schedule"].iloc[0], "width": int(group["width"].iloc[0]),
                    "branches": group["branches"].iloc[0], "rows_per_call": float(rows.mean()),
                    "model_ms_per_call": 1e3 * float(np.median(seconds)),
                    "branch_hit_share": float(group["branch_hits"].sum() / group["iterations"].sum())})
    return pd.DataFrame(out)


def steady_calls(runs: pd.DataFrame) -> pd.DataFrame:
    """Rows and model seconds of every call after each response's first (which processes the
    prompt): the run's own calls, for fitting tau + delta n on them."""
    from .bench import call_costs

    costs = call_costs(runs)
    return costs[costs["call"] > 0]


def predicted_time_per_nfe(calls: pd.DataFrame, calibrations: dict[str, dict]) -> pd.DataFrame:
    """The cost model tau + delta n (n = mean rows per call) of each calibration beside the
    measured model time per call, with their ratio."""
    out = calls.copy()
    for name, calibration in calibrations.items():
        predicted = 1e3 * (calibration["tau"] + calibration["delta"] * out["rows_per_call"])
        out[f"predicted_ms ({name})"] = predicted
        out[f"measured / predicted ({name})"] = out["model_ms_per_call"] / predicted
    return out


def regime_map(agg: pd.DataFrame, calls: pd.DataFrame, tau_over_delta) -> pd.DataFrame:
    """Predicted relative throughput of every method at each tau/delta: tokens/NFE / (x + rows
    per call), normalised by the best method at that x; ``winner`` marks the best one."""
    merged = agg.groupby("method", sort=False)[["tokens", "nfe"]].sum().reset_index().merge(
        calls[["method", "schedule", "rows_per_call"]], on="method")
    merged = merged[merged["schedule"] != "ar"]
    rows = []
    for x in np.asarray(tau_over_delta, dtype=float):
        speed = merged["tokens"] / merged["nfe"] / (x + merged["rows_per_call"])
        best = speed.max()
        rows += [{"tau_over_delta": x, "method": m, "schedule": s, "relative_throughput": float(v / best),
                  "winner": bool(v == best)} for m, s, v in zip(merged["method"], merged["schedule"], speed)]
    return pd.DataFrame(rows)


def against_packed(runs: pd.DataFrame, n_resamples: int, seed: int = 0) -> pd.DataFrame:
    """Paired bootstrap ratios (throughput, tokens/NFE, time/NFE) of every Quadratic-SS and
    partial-branch method to Packed-SS at the same block size."""
    from .bench import paired_bootstrap

    parts = []
    for width, group in runs[runs["schedule"] != "ar"].groupby("width"):
        others = [m for m in dict.fromkeys(group["method"]) if not m.startswith("packed")]
        baseline = PartialMethod("packed", int(width)).name
        if others and baseline in set(group["method"]):
            parts.append(paired_bootstrap(group, baseline, methods=others, n_resamples=n_resamples, seed=seed))
    return pd.concat(parts, ignore_index=True)


def winners_at(regimes: pd.DataFrame, marks: dict[str, float]) -> dict[str, str]:
    """The predicted fastest method at each marked tau/delta (nearest grid point).  A mark that
    is not a positive finite number (a calibration whose fitted tau or delta came out <= 0, as
    short noisy runs can give) has no place on the log axis: it reads ``"not measured (...)"``."""
    grid = np.unique(regimes["tau_over_delta"])
    out = {}
    for name, x in marks.items():
        if not (np.isfinite(x) and x > 0):
            out[name] = f"not measured (tau/delta = {x:.3g})"
            continue
        nearest = grid[np.argmin(np.abs(np.log(grid) - np.log(x)))]
        out[name] = regimes[(regimes["tau_over_delta"] == nearest) & regimes["winner"]]["method"].iloc[0]
    return out


def machine_tau_over_delta(calibration: dict) -> float:
    """tau/delta of a :func:`spec_lib.studies.costmodel.fit_cost` calibration."""
    return float(calibration["tau"] / calibration["delta"])


def calibration_summary(calibrations: dict[str, dict]) -> dict[str, dict]:
    """tau, delta (seconds), their ratio and R^2 of each calibration, JSON-able."""
    return {name: {"tau": c["tau"], "delta": c["delta"], "tau_over_delta": c["tau"] / c["delta"], "r2": c["r2"]}
            for name, c in calibrations.items()}
