"""Studies behind notebook 03: exact sampling (seed 000, Theorem 3.3, Lemmas B.3 and B.4).

* :func:`one_step_law` is the closed form of Lemma B.3's proof: the law of the token
  emitted by one accept / residual step; :func:`simulate_one_step` samples the library's
  own :func:`spec_lib.verify.rejection_verify`.
* :func:`stopped_law` enumerates the exact (tempered) AR law of every continuation of a
  ``MarkovLM`` stopped at the first EOS or at the length limit; :func:`sample_continuations`
  draws continuations with ``spec_lib.decode`` (any schedule, optionally a deliberately
  wrong ablation) in parallel worker processes; :func:`goodness_of_fit` compares them
  (chi-square and G-test via scipy, total variation against its sampling noise).
"""

from __future__ import annotations

import multiprocessing as mp
from collections import Counter
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import torch
from scipy import stats

from .. import verify
from ..decoding import decode
from ..toy import MarkovLM


def one_step_law(p: np.ndarray, q: np.ndarray, residual: bool = True) -> np.ndarray:
    """Law of the emitted token: min(p, q) + (1 - beta) * [p - q]_+ / (1 - beta) (Lemma B.3).

    ``residual=False`` draws the correction from p instead (a wrong rule, for contrast).
    """
    accepted = np.minimum(p, q)
    beta = accepted.sum()
    correction = np.clip(p - q, 0.0, None) if residual else p.copy()
    total = correction.sum()
    return accepted + (1.0 - beta) * (correction / total if total > 0 else correction)


def simulate_one_step(p: np.ndarray, q: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    """Counts of the token emitted by ``verify.rejection_verify`` over n trials, d ~ q."""
    gen = torch.Generator().manual_seed(seed)
    p_t = torch.as_tensor(p, dtype=torch.float64)
    q_t = torch.as_tensor(q, dtype=torch.float64)
    target = torch.stack([p_t, p_t])                                  # p^(1), and the bonus row
    drafts = verify.sample(q_t.expand(n, -1), gen)
    counts = np.zeros(len(p), dtype=np.int64)
    for d in drafts.tolist():
        _, emitted = verify.rejection_verify(torch.tensor([d]), q_t[None], target, gen)
        counts[int(emitted[0])] += 1
    return counts


def one_step_report(p: np.ndarray, q: np.ndarray, n: int, seed: int = 0) -> dict:
    """Lemma B.3 for one (P, Q): closed-form error, and a simulation of the implementation.

    ``chi2_p`` tests the simulated frequencies against P on P's support (1.0 when the
    support is a single token, which then must hold every draw: ``mass_outside_support``).
    ``no_residual_error`` is the closed-form error of the wrong rule, to show the check can fail.
    """
    counts = simulate_one_step(p, q, n, seed)
    support = p > 0
    se = np.sqrt(p * (1 - p) / n)
    z = np.abs(counts / n - p)[support & (se > 0)] / se[support & (se > 0)]
    return {"closed_form_error": float(np.abs(one_step_law(p, q) - p).max()),
            "chi2_p": float(stats.chisquare(counts[support], n * p[support]).pvalue) if support.sum() > 1 else 1.0,
            "max_z": float(z.max()) if z.size else 0.0,
            "mass_outside_support": int(counts[~support].sum()),
            "no_residual_error": float(np.abs(one_step_law(p, q, residual=False) - p).max())}


def stopped_law(toy: MarkovLM, prompt: list[int], length: int, temperature: float) -> dict[tuple, float]:
    """Exact law of continuations stopped at the first EOS or after ``length`` tokens."""
    eos = toy.eos_token_id
    law: dict[tuple, float] = {}

    def tempered(context):
        p = toy.next_token_probs(context) ** (1.0 / temperature)
        return p / p.sum()

    def extend(seq: tuple, prob: float) -> None:
        if seq and (seq[-1] == eos or len(seq) == length):
            law[seq] = law.get(seq, 0.0) + prob
            return
        p = tempered(list(prompt) + list(seq))
        for token in range(toy.vocab_size):
            if p[token] > 0:
                extend(seq + (token,), prob * p[token])

    extend((), 1.0)
    return law


def _sample_chunk(args) -> Counter:
    toy_kwargs, prompt, seeds, decode_kwargs = args
    torch.set_num_threads(1)
    toy = MarkovLM(**toy_kwargs)
    counts: Counter = Counter()
    for seed in seeds:
        counts[tuple(decode(toy, prompt, seed=seed, **decode_kwargs).tokens)] += 1
    return counts


def sample_continuations(toy_kwargs: dict, prompt: list[int], n: int, *, seed: int = 0, workers: int = 2,
                         **decode_kwargs) -> Counter:
    """Counts of ``decode(MarkovLM(**toy_kwargs), prompt, seed=s, **decode_kwargs)`` for n seeds.

    Each sample uses its own seed (seed * 10**7 + i), so results do not depend on ``workers``.
    """
    seeds = np.arange(n) + seed * 10_000_000
    chunks = [(toy_kwargs, prompt, part.tolist(), decode_kwargs) for part in np.array_split(seeds, max(1, workers) * 4)]
    if workers <= 1:
        parts = map(_sample_chunk, chunks)
    else:
        with ProcessPoolExecutor(workers, mp_context=mp.get_context("fork")) as pool:
            parts = list(pool.map(_sample_chunk, chunks))
    total: Counter = Counter()
    for part in parts:
        total.update(part)
    return total


def tv_noise(law: np.ndarray, n: int, quantile: float = 0.99, replicates: int = 400, seed: int = 0) -> float:
    """The ``quantile`` of the total-variation distance between the exact law and the
    empirical law of n exact draws: what sampling noise alone produces."""
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(n, law / law.sum(), size=replicates) / n
    return float(np.quantile(0.5 * np.abs(draws - law).sum(axis=1), quantile))


def goodness_of_fit(counts: Counter, law: dict[tuple, float], min_expected: float = 5.0) -> dict:
    """Chi-square and G-test p-values, and total variation vs its sampling noise.

    Outcomes with expected count below ``min_expected`` are pooled into one cell (with any
    outcome outside the law's support, which makes the fit fail as it should).
    """
    n = sum(counts.values())
    keys = sorted(law, key=law.get, reverse=True)
    probs = np.array([law[k] for k in keys])
    observed = np.array([counts.get(k, 0) for k in keys], dtype=float)
    outside = n - observed.sum()                                       # outcomes the law forbids
    expected = probs * n
    small = expected < min_expected
    obs = np.append(observed[~small], observed[small].sum() + outside)
    exp = np.append(expected[~small], expected[small].sum())
    if exp[-1] == 0:                                                   # nothing pooled
        if outside:
            return {"n": n, "cells": len(obs), "chi2_p": 0.0, "g_p": 0.0, "tv": 1.0, "tv_noise_99": 0.0}
        obs, exp = obs[:-1], exp[:-1]
    chi2 = stats.chisquare(obs, exp)
    g = stats.power_divergence(obs, exp, lambda_="log-likelihood")
    tv = 0.5 * (np.abs(observed / n - probs).sum() + outside / n)
    return {"n": n, "cells": int(len(obs)), "chi2": float(chi2.statistic), "chi2_p": float(chi2.pvalue),
            "g_p": float(g.pvalue), "tv": float(tv), "tv_noise_99": tv_noise(probs, n)}



def fit_configs(configs: list[dict], *, vocab_size: int, eos_token_id: int, prompt: list[int], length: int,
                width: int, workers: int = 2, progress: bool = True):
    """Sample and test each configuration against its exact stopped law.

    Each config holds ``schedule, n, temperature, draft_noise, chain_seed, sample_seed`` and
    optionally ``ablation``, ``draft_top_k`` and ``drafter`` (a separate drafter, e.g.
    :class:`spec_lib.drafters.ExactDiffusionDrafter`, for ``deer`` / ``ar_draft``; the
    target is then the chain of ``chain_seed`` without drafter noise).  Returns
    ``(table, counts)``: one row of :func:`goodness_of_fit` statistics per config (with
    ``role`` = correct / negative control and a readable ``label``), and the raw counts with
    their laws.
    """
    import pandas as pd
    from tqdm.auto import tqdm

    rows, raw = [], []
    for cfg in tqdm(configs, desc="sampling configurations", disable=not progress):
        toy_kwargs = dict(vocab_size=vocab_size, seed=cfg["chain_seed"], eos_token_id=eos_token_id,
                          draft_noise=cfg["draft_noise"])
        law = stopped_law(MarkovLM(**toy_kwargs), prompt, length, cfg["temperature"])
        extra = {k: cfg[k] for k in ("drafter",) if cfg.get(k) is not None}
        counts = sample_continuations(toy_kwargs, prompt, cfg["n"], seed=cfg["sample_seed"], workers=workers,
                                      schedule=cfg["schedule"], width=width, max_new_tokens=length,
                                      temperature=cfg["temperature"], eos_token_id=eos_token_id,
                                      ablation=cfg.get("ablation"), draft_top_k=cfg.get("draft_top_k"), **extra)
        rows.append({**{k: cfg.get(k) for k in ("schedule", "ablation", "draft_top_k", "temperature",
                                                  "draft_noise", "chain_seed", "sample_seed")},
                     "role": "negative control" if cfg.get("ablation") else "correct",
                     "label": _label(cfg), **goodness_of_fit(counts, law)})
        raw.append((counts, law))
    return pd.DataFrame(rows), raw


def _label(cfg: dict) -> str:
    parts = [cfg["schedule"]]
    if cfg.get("ablation"):
        parts.append(cfg["ablation"])
    if cfg.get("draft_top_k"):
        parts.append(f"top-{cfg['draft_top_k']} Q")
    return " / ".join(parts)


def verdicts(fits, alpha_pass: float, alpha_fail: float) -> dict[str, bool]:
    """The two claims of an exactness study, each on both tests (chi-square and G):
    every correct configuration has p > ``alpha_pass``; every negative control p < ``alpha_fail``."""
    correct = fits[fits["role"] == "correct"]
    controls = fits[fits["role"] == "negative control"]
    return {"correct_fit_exact_law": bool(len(correct)) and bool(((correct["chi2_p"] > alpha_pass)
                                                                  & (correct["g_p"] > alpha_pass)).all()),
            "negative_controls_rejected": bool(len(controls)) and bool(((controls["chi2_p"] < alpha_fail)
                                                                        & (controls["g_p"] < alpha_fail)).all())}


def main_configs(n: int, temperature: float, draft_noise: float, top_k: int) -> list[dict]:
    """Notebook 03's main configuration: every LTR schedule, the three broken Packed-SS
    variants and two no-residual controls, and top-k-truncated stored Q."""
    main = dict(temperature=temperature, draft_noise=draft_noise, chain_seed=0, n=n)
    configs = [{**main, "schedule": s, "sample_seed": 0} for s in ("ar", "linear", "quadratic", "packed")]
    configs += [{**main, "schedule": "packed", "ablation": a, "sample_seed": 1}
                for a in ("fresh_q", "no_residual", "resample_without_q")]
    configs += [{**main, "schedule": s, "ablation": "no_residual", "sample_seed": 1} for s in ("linear", "quadratic")]
    configs += [{**main, "schedule": s, "draft_top_k": top_k, "sample_seed": 2} for s in ("linear", "quadratic", "packed")]
    return configs


def repeat_configs(n: int, temperatures, draft_noises, chain_seeds) -> list[dict]:
    """Every LTR schedule on other chains, temperatures and drafter noise levels."""
    return [dict(schedule=s, temperature=t, draft_noise=eta, chain_seed=c, sample_seed=10 + c, n=n)
            for s in ("ar", "linear", "quadratic", "packed") for t in temperatures for eta in draft_noises
            for c in chain_seeds]


def drafter_configs(drafters: dict, n: int, temperatures, chain_seed: int, top_k: int = 2) -> list[dict]:
    """Notebook 22: ``deer`` and ``ar_draft`` with their drafters at each temperature, DEER with
    top-k truncated q, and a no-residual negative control of each."""
    configs = []
    base = dict(draft_noise=0.0, chain_seed=chain_seed, n=n)
    for t in temperatures:
        for i, (schedule, drafter) in enumerate(drafters.items()):
            configs.append({**base, "schedule": schedule, "drafter": drafter, "temperature": t, "sample_seed": 20 + i})
            configs.append({**base, "schedule": schedule, "drafter": drafter, "temperature": t, "sample_seed": 30 + i,
                            "ablation": "no_residual"})
        configs.append({**base, "schedule": "deer", "drafter": drafters["deer"], "temperature": t, "sample_seed": 40,
                        "draft_top_k": top_k})
    return configs


def lemma_b3_cases(vocab_size: int = 8, top_k: int = 3, seed: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(P, Q) pairs for Lemma B.3: random, disjoint supports, Q = P, point masses, truncated Q."""
    rng = np.random.default_rng(seed)
    p_rand, q_rand = rng.dirichlet(np.ones(vocab_size)), rng.dirichlet(np.ones(vocab_size) * 0.3)
    disjoint_p = np.r_[0.2, 0.3, 0.5, np.zeros(vocab_size - 3)]
    disjoint_q = np.r_[np.zeros(3), np.full(vocab_size - 3, 1 / (vocab_size - 3))]
    point = np.eye(vocab_size)[2]
    q_topk = verify.truncate(torch.tensor(q_rand)[None], top_k=top_k).dense()[0].numpy()
    return {"random P, Q": (p_rand, q_rand), "disjoint supports": (disjoint_p, disjoint_q), "Q = P": (p_rand, p_rand),
            "Q point mass": (p_rand, point), "P point mass": (point, q_rand), f"Q top-{top_k} truncated": (p_rand, q_topk)}


def lemma_b3_table(cases: dict, n: int):
    """:func:`one_step_report` for every case (seed = the case's index)."""
    import pandas as pd

    return pd.DataFrame([{"case": name, **one_step_report(p, q, n, seed=i)} for i, (name, (p, q)) in enumerate(cases.items())])


def p_value_summary(fits, repeats):
    """Every configuration's chi-square p-value for the strip plot: main, repeats, controls."""
    import pandas as pd

    summary = pd.concat([fits.assign(group=np.where(fits["role"] == "correct", "main", "negative control")),
                         repeats.assign(group="repeats")])
    summary["-log10 p (chi-square)"] = -np.log10(np.maximum(summary["chi2_p"], 1e-300))
    return summary


def calibration(law: dict, n: int, replicates: int, seed: int) -> tuple[np.ndarray, dict]:
    """p-values of the test on exact multinomial draws and their uniformity (KS test)."""
    null = null_p_values(law, n, replicates=replicates, seed=seed)
    return null, {"below_0.05": float(np.mean(null < 0.05)), "below_0.01": float(np.mean(null < 0.01)),
                  "ks_uniform_p": float(stats.kstest(null, "uniform").pvalue), "replicates": int(len(null))}


def standardized_residuals(counts: Counter, law: dict[tuple, float], min_expected: float = 5.0):
    """``(exact_prob, z)`` per outcome with expected count >= ``min_expected``:
    z = (observed - expected) / sqrt(expected * (1 - p)), ~ N(0, 1) under the exact law."""
    n = sum(counts.values())
    probs = np.array(list(law.values()))
    observed = np.array([counts.get(k, 0) for k in law], dtype=float)
    keep = probs * n >= min_expected
    expected = probs[keep] * n
    return probs[keep], (observed[keep] - expected) / np.sqrt(expected * (1 - probs[keep]))


def null_p_values(law: dict[tuple, float], n: int, replicates: int = 200, seed: int = 0) -> np.ndarray:
    """Chi-square p-values of ``replicates`` samples of n exact draws from ``law``: the
    test's own calibration (they should be uniform on [0, 1])."""
    keys = list(law)
    probs = np.array([law[k] for k in keys])
    rng = np.random.default_rng(seed)
    out = []
    for counts in rng.multinomial(n, probs / probs.sum(), size=replicates):
        out.append(goodness_of_fit(Counter({keys[i]: int(c) for i, c in enumerate(counts) if c}), law)["chi2_p"])
    return np.array(out)


def mean_total_variation(first: MarkovLM, second: MarkovLM) -> float:
    """Mean total variation between two chains' next-token rows (how far q is from p)."""
    return float(0.5 * np.abs(first.transition - second.transition).sum(1).mean())
