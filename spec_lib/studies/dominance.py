"""Studies behind notebook 02: pathwise dominance of Packed-SS over Linear-SS (Theorem 3.2).

Three levels of evidence (seed 000, Sec. 3.1 and App. B.1):

1. :func:`threshold_study`: the vectorised dynamics of :mod:`spec_lib.sim` on many random
   threshold sequences satisfying Assumption 3.1; every inequality of the proof is counted.
2. :func:`end_to_end_study`: the real ``decode`` schedules on :class:`ScriptedDrafterLM`,
   whose drafter satisfies the assumption by construction, with and without EOS; the
   simulator's trajectories are checked against the decoder's.
3. :func:`markov_study`: exact-marginal drafters on ``MarkovLM`` (the assumption may fail):
   how often dominance still holds.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ..decoding import decode
from ..schedules import SCHEDULE_SPECS
from ..toy import MarkovLM, ScriptedDrafterLM
from . import sim

CALLS_PER_ITERATION = {s: len(SCHEDULE_SPECS[s].calls) for s in ("packed", "linear")}


def nfe_to_reach(accepted: list[int], calls_per_iteration: int, length: int) -> np.ndarray:
    """``(length,)``: forward passes needed to have L = 1..length tokens, from one decode."""
    reached = np.cumsum(accepted)
    first = np.searchsorted(reached, np.arange(1, length + 1), side="left")   # iteration index
    return calls_per_iteration * (first + 1)


def threshold_study(widths, instances: int, length: int, seed: int = 0, progress: bool = True):
    """Run :func:`sim.dominance_report` for every generator and width.

    Returns ``(summary, samples)``: one summary row per (generator, W) with violation
    counts and NFE-ratio quantiles, and per (generator, W) the NFE ratios and margins.
    """
    rng = np.random.default_rng(seed)
    rows, samples = [], {}
    grid = [(name, w) for w in widths for name in sim.GENERATORS]
    for name, width in tqdm(grid, desc="threshold instances", disable=not progress):
        thresholds = sim.GENERATORS[name](instances, length + width + 2, width, rng)
        report = sim.dominance_report(thresholds, width, length)
        ratio = report["nfe_ratio"]
        rows.append({"generator": name, "width": width, "instances": report["instances"],
                     "theorem_violations": report["theorem_violations"],
                     "nfe_violations": report["nfe_violations"],
                     "lemma_b1_violations": report["lemma_b1_violations"],
                     "lemma_b2_violations": report["lemma_b2_violations"],
                     "nfe_ratio_median": float(np.median(ratio)), "nfe_ratio_min": float(ratio.min()),
                     "nfe_ratio_max": float(ratio.max()), "min_margin": int(report["margin"].min()),
                     "median_margin": float(np.median(report["margin"]))})
        samples[(name, width)] = {"nfe_ratio": ratio, "margin": report["margin"]}
    return pd.DataFrame(rows), samples


def end_to_end_study(widths, instances: int, length: int, vocab_size: int = 16, eos_token_id: int = 0,
                     seed: int = 0, progress: bool = True) -> pd.DataFrame:
    """Decode with the real schedules on scripted-threshold models; check NFE(L) for all L.

    Half of the continuations contain EOS (id ``eos_token_id``) at a random position; then
    decoding stops there and the comparison covers L up to that point.  Also checks that the
    decoder's verified lengths equal :func:`sim.simulate`'s (no EOS case).
    """
    rng = np.random.default_rng(seed)
    prompt = [1, 2, 3]
    rows = []
    grid = [(name, w) for w in widths for name in sim.GENERATORS]
    for name, width in tqdm(grid, desc="end-to-end decodes", disable=not progress):
        size = length + width + 2
        thresholds = sim.GENERATORS[name](instances, size + 1, width, rng)
        traj = sim.simulate(thresholds, width, length)
        violations = agree = eos_runs = 0
        for i in range(instances):
            continuation = rng.integers(1, vocab_size, size)           # never EOS by default
            with_eos = i % 2 == 1
            if with_eos:
                continuation[rng.integers(0, length)] = eos_token_id
            model = ScriptedDrafterLM(continuation, vocab_size, len(prompt), thresholds=thresholds[i])
            nfe, out = {}, {}
            for schedule in ("packed", "linear"):
                res = decode(model, prompt, schedule=schedule, width=width, max_new_tokens=length,
                             eos_token_id=eos_token_id if with_eos else None)
                out[schedule] = res
                nfe[schedule] = nfe_to_reach(res.accepted, CALLS_PER_ITERATION[schedule], len(res.tokens))
            assert out["packed"].tokens == out["linear"].tokens       # same greedy continuation
            violations += int((nfe["packed"] > nfe["linear"]).sum())
            eos_runs += with_eos
            if not with_eos:
                same = all(np.array_equal(np.cumsum(out[s].accepted),
                                          np.minimum(getattr(traj, s)[i, 1: len(out[s].accepted) + 1], length))
                           for s in ("packed", "linear"))
                agree += same
        rows.append({"generator": name, "width": width, "instances": instances, "with_eos": eos_runs,
                     "nfe_violations": violations, "simulator_agrees": agree,
                     "simulator_checked": instances - eos_runs})
    return pd.DataFrame(rows)


def markov_study(widths, noises, instances: int, length: int, vocab_size: int = 6,
                 concentration: float = 0.3, seed: int = 0, progress: bool = True) -> pd.DataFrame:
    """Exact-marginal (optionally noisy) drafters on random Markov chains: share of
    instances where NFE_Packed(L) <= NFE_Linear(L) for every L, and of (instance, L) pairs."""
    rows = []
    grid = [(w, eta) for w in widths for eta in noises]
    for width, noise in tqdm(grid, desc="Markov instances", disable=not progress):
        all_l = pairs = ok_pairs = 0
        ratios = []
        for i in range(instances):
            toy = MarkovLM(vocab_size, seed=seed * 100_003 + i, draft_noise=noise, concentration=concentration)
            prompt = [i % vocab_size]
            nfe = {s: nfe_to_reach(decode(toy, prompt, schedule=s, width=width, max_new_tokens=length).accepted,
                                   CALLS_PER_ITERATION[s], length) for s in ("packed", "linear")}
            ok = nfe["packed"] <= nfe["linear"]
            all_l += bool(ok.all())
            pairs += ok.size
            ok_pairs += int(ok.sum())
            ratios.append(nfe["packed"][-1] / nfe["linear"][-1])
        rows.append({"width": width, "draft_noise": noise, "instances": instances,
                     "dominance_all_L": all_l / instances, "dominance_pairs": ok_pairs / pairs,
                     "nfe_ratio_median": float(np.median(ratios))})
    return pd.DataFrame(rows)
