"""Decoding experiments: grids of decode runs over prompt slices, the paper's metrics and
paired bootstrap confidence intervals.

References (seed 000): Sec. 4 "Experimental setup" (aggregate throughput = total generated
tokens / total decoder wall time = (tokens/NFE) / (time/NFE)); App. E.4 (several samples
per code prompt at temperature 1); App. E.5 (NFE includes prompt processing; generated
tokens include stop tokens; 95% percentile intervals from 20,000 bootstrap resamples of
prompts, the same indices for every method); App. F.6 (greedy divergences from finite
precision); App. F.7 (paired differences and ratios).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from ..decoding import decode
from ..schedules import DRAFTER_SCHEDULES, DecodeResult
from . import slices
from .repetition import repetition_share


@dataclass(frozen=True)
class Method:
    """One decoding configuration: a schedule at a speculative width (B = W + 1), or a
    drafter schedule (``deer``, ``ar_draft``) with its drafter and block size k = width."""

    schedule: str
    width: int
    drafter: object = field(default=None, compare=False, repr=False)
    label: str = ""

    @property
    def name(self) -> str:
        if self.label:
            return self.label
        if self.schedule == "ar":
            return "ar"
        if self.schedule in DRAFTER_SCHEDULES:
            return f"{self.schedule} k={self.width}"
        return f"{self.schedule} B={self.width + 1}"


def block_methods(blocks: dict[str, list[int]], reference: bool = True) -> list[Method]:
    """AR (when ``reference``) and each schedule at each of its block sizes B (width W = B - 1)."""
    return ([Method("ar", 1)] if reference else []) + [Method(s, b - 1) for s, bs in blocks.items() for b in bs]


def drafter_methods(drafters: dict, blocks, reference: bool = False) -> list[Method]:
    """AR (when ``reference``) and each drafter schedule (``{"deer": drafter, "ar_draft":
    drafter}``) at each block size k."""
    return ([Method("ar", 1)] if reference else []) + [Method(schedule, k, drafter=drafter) for k in blocks
                                                       for schedule, drafter in drafters.items()]


def labelled_methods(schedule: str, width: int, drafters: dict) -> list[Method]:
    """One method per labelled drafter (``{label: drafter}``) of a drafter schedule."""
    return [Method(schedule, width, drafter=drafter, label=label) for label, drafter in drafters.items()]


def prompt_counts(prompts: dict) -> dict[str, int]:
    """Prompts per slice."""
    return {name: len(items) for name, items in prompts.items()}


def expected_responses(prompts: dict, methods, samples: dict | None = None) -> int:
    """Responses a grid must record: methods x prompts x samples per prompt."""
    samples = samples or {}
    return len(methods) * sum(len(items) * samples.get(name, 1) for name, items in prompts.items())


def best_speedups(agg: pd.DataFrame, reference: str = "ar") -> dict[str, dict]:
    """:func:`best_speedup` of every slice."""
    return {s: best_speedup(agg, s, reference) for s in dict.fromkeys(agg["slice"])}


def encode(tokenizer, prompts: list[str], max_prompt_tokens: int, strip: bool = True) -> list[list[int]]:
    """Token ids of each prompt, keeping its last ``max_prompt_tokens`` tokens.

    With ``strip`` (the default), trailing whitespace is removed first.  A byte-level BPE
    trained on code merges a newline with the next line's indentation ("\\n   " is one
    token), so a prompt ending in a bare newline (every HumanEval and stdlib prompt ends
    with ``\"\"\"\\n``) presents a token that in training only precedes unindented text: a
    small model then starts an unrelated top-level statement instead of the body.
    """
    ids = tokenizer([p.rstrip() if strip else p for p in prompts], add_special_tokens=False)["input_ids"]
    return [p[-max_prompt_tokens:] for p in ids]


def slice_prompts(tokenizer, counts: dict[str, int], max_prompt_tokens: int, seed: int = 0) -> dict[str, list[list[int]]]:
    """Encoded prompts of several evaluation slices (:func:`spec_lib.studies.slices.eval_slice`),
    ``counts[name]`` prompts each (slices with a count of 0 are left out)."""
    return {name: encode(tokenizer, slices.eval_slice(name, n, seed=seed), max_prompt_tokens)
            for name, n in counts.items() if n}


def run_grid(model, prompts: dict[str, list[list[int]]], methods: list[Method], *,
             max_new_tokens: dict[str, int] | int, temperature: float = 0.0, samples: dict[str, int] | None = None,
             eos_token_id: int | None = None, seed: int = 0, progress: bool = True, client=None) -> pd.DataFrame:
    """Decode every prompt of every slice with every method; one row per response.

    ``max_new_tokens`` is a cap per slice or one cap for all.  Methods are interleaved prompt
    by prompt in a rotating order, so that slow phases of the
    machine hit all methods alike.  At temperature > 0 each (prompt, sample) uses the same
    seed for every method.  Columns: slice, prompt, sample, method, schedule, width,
    tokens, nfe, wall, model, iterations, output (token ids), rows_per_call, call_seconds,
    accepted (tokens per iteration), drafter_nfe and drafter_seconds (separate drafters),
    repetition (:func:`spec_lib.studies.repetition.repetition_share` of the output).

    ``client``: a Dask ``distributed.Client`` (:func:`spec_lib.studies.fanout.connect`) to
    fan the jobs out: one job is one (prompt, sample) with all its methods, on one worker
    (:func:`spec_lib.studies.fanout.run_jobs`).  Tokens, NFE and acceptance are the serial
    run's; timings are each worker's.
    """
    samples = samples or {}
    if not isinstance(max_new_tokens, dict):                 # one cap for every slice
        max_new_tokens = dict.fromkeys(prompts, max_new_tokens)
    settings = {"max_new_tokens": max_new_tokens, "temperature": temperature, "eos_token_id": eos_token_id,
                "seed": seed}
    jobs = [(name, i, s, prompts[name][i]) for name, items in prompts.items() for i in range(len(items))
            for s in range(samples.get(name, 1))]
    if not jobs:
        raise ValueError(f"prompts must hold at least one prompt to decode, got {prompt_counts(prompts)}")
    if client is not None:
        from .fanout import run_jobs

        return pd.DataFrame(run_jobs(client, model, methods, jobs, settings, rows=job_rows, warm_up=warm_up,
                                     progress=progress))
    warm_up(model, methods, jobs[0][3], settings)
    rows = []
    for job, spec in enumerate(tqdm(jobs, desc="decoding", disable=not progress)):
        rows += job_rows(model, methods, job, spec, settings)
    return pd.DataFrame(rows)


def warm_up(model, methods: list[Method], prompt: list[int], settings: dict) -> None:
    """One short decode per method (allocations, lazy tables), outputs discarded."""
    for method in methods:
        decode(model, prompt, schedule=method.schedule, width=method.width, max_new_tokens=8,
               temperature=settings["temperature"], seed=settings["seed"], drafter=method.drafter)


def job_rows(model, methods: list[Method], job: int, spec: tuple, settings: dict) -> list[dict]:
    """The rows of one job of :func:`run_grid`: prompt ``spec = (slice, index, sample,
    token ids)`` decoded by every method, in the order rotated by the job's number."""
    name, i, s, prompt = spec
    order = methods[job % len(methods):] + methods[: job % len(methods)]
    rows = []
    for method in order:
        res = decode(model, prompt, schedule=method.schedule, width=method.width,
                     max_new_tokens=settings["max_new_tokens"][name], temperature=settings["temperature"],
                     eos_token_id=settings["eos_token_id"], seed=settings["seed"] * 1_000_003 + i * 1_000 + s,
                     drafter=method.drafter)
        rows.append({"slice": name, "prompt": i, "sample": s, "method": method.name,
                     "schedule": method.schedule, "width": method.width, "tokens": len(res.tokens),
                     "nfe": res.nfe, "wall": res.wall_seconds, "model": res.model_seconds,
                     "iterations": len(res.accepted), "output": tuple(res.tokens),
                     "rows_per_call": res.rows_per_call, "call_seconds": res.extras["call_seconds"],
                     "accepted": tuple(res.accepted), "drafter_nfe": res.extras.get("drafter_nfe", 0),
                     "drafter_seconds": res.extras.get("drafter_seconds", 0.0),
                     "repetition": repetition_share(res.tokens)})
    return rows


def aggregate(runs: pd.DataFrame, by=("slice", "method")) -> pd.DataFrame:
    """Aggregate metrics: throughput (tokens/s), tokens/NFE, time/NFE (ms), mean wall per
    response (s), mean accepted tokens per iteration, model share of wall time, and the mean
    repetition share of the outputs (read tokens per iteration beside it); with each
    method's schedule and width."""
    g = runs.groupby(list(by), sort=False)
    extra = {k: (k, "first") for k in ("schedule", "width") if k in runs and k not in by}
    if "repetition" in runs:
        extra["repetition"] = ("repetition", "mean")
    out = g.agg(responses=("tokens", "size"), tokens=("tokens", "sum"), nfe=("nfe", "sum"), wall=("wall", "sum"),
                model=("model", "sum"), iterations=("iterations", "sum"), **extra).reset_index()
    out["throughput"] = out["tokens"] / out["wall"]
    out["tokens_per_nfe"] = out["tokens"] / out["nfe"]
    out["time_per_nfe_ms"] = 1e3 * out["wall"] / out["nfe"]
    out["wall_per_response"] = out["wall"] / out["responses"]
    out["tokens_per_iteration"] = out["tokens"] / out["iterations"]
    out["model_share"] = out["model"] / out["wall"]
    return out


def paired_bootstrap(runs: pd.DataFrame, baseline: str, *, n_resamples: int = 20_000, seed: int = 0,
                     confidence: float = 0.95, methods: list[str] | None = None) -> pd.DataFrame:
    """Ratios to ``baseline`` (throughput, tokens/NFE, time/NFE, mean wall) and the wall-time
    difference, with paired percentile CIs over prompts (App. E.5).  ``methods`` restricts
    the comparison to these methods (and the baseline).  Without an ``nfe`` column only
    throughput and wall time are compared.

    Each resample draws prompt indices with replacement, uses them for every method, and
    recomputes the aggregate statistics from all responses of the drawn prompts.
    """
    if methods is not None:
        runs = runs[runs["method"].isin([baseline, *methods])]
    rng = np.random.default_rng(seed)
    alpha = (1 - confidence) / 2
    out = []
    has_nfe = "nfe" in runs
    for name, part in runs.groupby("slice", sort=False):
        columns = {"tokens": ("tokens", "sum"), "wall": ("wall", "sum"), "n": ("tokens", "size")}
        if has_nfe:
            columns["nfe"] = ("nfe", "sum")
        per = part.groupby(["prompt", "method"]).agg(**columns)
        names = list(dict.fromkeys(part["method"]))
        prompts = sorted(part["prompt"].unique())
        cube = {k: per[k].unstack("method").reindex(index=prompts, columns=names).to_numpy(float)
                for k in columns}                                              # each (P, M)
        draws = rng.integers(0, len(prompts), (n_resamples, len(prompts)))
        weights = np.zeros((n_resamples, len(prompts)))
        np.add.at(weights, (np.arange(n_resamples)[:, None], draws), 1.0)   # (R, P) multiplicities
        weights = np.vstack([np.ones(len(prompts)), weights])                # row 0: the point estimate
        sums = {k: weights @ v for k, v in cube.items()}                     # (1 + R, M)
        stats = {"throughput": sums["tokens"] / sums["wall"], "wall_per_response": sums["wall"] / sums["n"]}
        if has_nfe:
            stats |= {"tokens_per_nfe": sums["tokens"] / sums["nfe"], "time_per_nfe": sums["wall"] / sums["nfe"]}
        b = names.index(baseline)
        for j, method in enumerate(names):
            if j == b:
                continue
            row = {"slice": name, "method": method, "baseline": baseline, "prompts": len(prompts)}
            for metric, values in stats.items():
                ratio = values[:, j] / values[:, b]
                row[f"{metric}_ratio"] = ratio[0]
                row[f"{metric}_ratio_low"], row[f"{metric}_ratio_high"] = np.quantile(ratio[1:], [alpha, 1 - alpha])
            diff = stats["wall_per_response"][:, j] - stats["wall_per_response"][:, b]
            row["wall_diff_s"] = diff[0]
            row["wall_diff_low"], row["wall_diff_high"] = np.quantile(diff[1:], [alpha, 1 - alpha])
            out.append(row)
    return pd.DataFrame(out)


def identity_to_reference(runs: pd.DataFrame, reference: str = "ar") -> pd.DataFrame:
    """Per slice and method: responses whose tokens equal the reference method's on the same
    prompt and sample (greedy decoding must give identical outputs)."""
    ref = runs[runs["method"] == reference].set_index(["slice", "prompt", "sample"])["output"]
    other = runs[runs["method"] != reference].copy()
    other["identical"] = [out == ref.loc[(s, p, k)] for s, p, k, out in
                          zip(other["slice"], other["prompt"], other["sample"], other["output"])]
    return other.groupby(["slice", "method"], sort=False)["identical"].agg(["sum", "size"]).reset_index() \
        .rename(columns={"sum": "identical", "size": "responses"})


@torch.inference_mode()
def divergences(hf_model, runs: pd.DataFrame, prompts: dict[str, list[list[int]]],
                reference: str = "ar") -> pd.DataFrame:
    """Each greedy output that differs from the reference, with the reference model's logit
    gap (top-1 minus top-2, in one causal forward) at the first differing position: a gap
    near zero means a finite-precision tie (seed 000, App. F.6)."""
    ref = runs[runs["method"] == reference].set_index(["slice", "prompt", "sample"])["output"]
    rows = []
    for row in runs[runs["method"] != reference].itertuples():
        expected = ref.loc[(row.slice, row.prompt, row.sample)]
        if row.output == expected:
            continue
        j = next((k for k, (a, b) in enumerate(zip(row.output, expected)) if a != b), min(len(row.output), len(expected)))
        prompt = prompts[row.slice][row.prompt]
        ids = torch.tensor([*prompt, *expected[:j]])[None].to(next(hf_model.parameters()).device)
        logits = hf_model(input_ids=ids).logits[0, -1].float()
        top2 = torch.topk(logits, 2).values
        method_token = row.output[j] if j < len(row.output) else None
        rows.append({"slice": row.slice, "prompt": row.prompt, "method": row.method, "position": j,
                     "reference_token": expected[j] if j < len(expected) else None, "method_token": method_token,
                     "logit_gap_top1_top2": float(top2[0] - top2[1]),
                     "method_token_deficit": float(logits.max() - logits[method_token]) if method_token is not None else None})
    return pd.DataFrame(rows, columns=["slice", "prompt", "method", "position", "reference_token", "method_token",
                                       "logit_gap_top1_top2", "method_token_deficit"])


def identity_check(identity: pd.DataFrame, diverged: pd.DataFrame, tie_gap: float) -> dict:
    """Greedy exactness as a claim that can fail: every speculative output equals the
    reference's, or differs only where the reference model's top-2 logit gap is below
    ``tie_gap`` (a finite-precision tie, seed 000 App. F.6).  ``ok`` is False as soon as
    one divergence has a larger gap."""
    gaps = diverged["logit_gap_top1_top2"].to_numpy(float) if len(diverged) else np.zeros(0)
    unexplained = int((gaps >= tie_gap).sum())
    return {"responses": int(identity["responses"].sum()), "identical": int(identity["identical"].sum()),
            "divergences": int(len(diverged)), "explained_by_ties": int((gaps < tie_gap).sum()),
            "unexplained": unexplained, "tie_gap": tie_gap, "max_gap": float(gaps.max()) if gaps.size else 0.0,
            "ok": unexplained == 0 and int(identity["identical"].sum()) + len(diverged) == int(identity["responses"].sum())}


def call_costs(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per model call of every response: rows evaluated, model seconds and the call's
    index in its response (call 0 processes the prompt); for the cost model tau + delta * rows
    (seed 000, Sec. 1)."""
    rows = [(r, s, j) for rows_, secs in zip(runs["rows_per_call"], runs["call_seconds"])
            for j, (r, s) in enumerate(zip(rows_, secs))]
    return pd.DataFrame(rows, columns=["rows", "seconds", "call"])


def drafter_accuracy(model, prompts: list[list[int]], width: int) -> pd.DataFrame:
    """Per offset i = 1..W: how often the drafter's i-th proposal from the prompt (one
    drafting call, the Linear-SS draft) equals the i-th token of the AR greedy continuation.
    Also the share of prompts whose first i proposals are all correct, which bounds the
    tokens a fresh draft can contribute (seed 000, Lemma B.1's F)."""
    hits = np.zeros((len(prompts), width), dtype=bool)
    for n, prompt in enumerate(prompts):
        greedy = decode(model, prompt, schedule="ar", width=1, max_new_tokens=width).tokens
        model.reset()
        out = model.call("linear_draft", torch.as_tensor(prompt, device=model.device),
                         torch.empty(0, dtype=torch.long, device=model.device), width)
        model.commit(0)
        proposal = out.draft_logits[0].argmax(-1).tolist()
        hits[n] = [a == b for a, b in zip(proposal, greedy)]
    return pd.DataFrame({"offset": np.arange(1, width + 1), "accuracy": hits.mean(0),
                         "all_correct_up_to": np.cumprod(hits, axis=1).mean(0)})


def cost_model_check(runs: pd.DataFrame, method: str, baseline: str, calibration: dict | None = None) -> dict:
    """Predicted versus observed throughput ratio ``method / baseline`` (seed 000, Sec. 1).

    Each method's time per NFE is predicted as tau + delta * (its mean rows per call) plus
    its measured non-model decoder time per NFE; the predicted throughput ratio is the
    measured tokens/NFE ratio times the inverse ratio of predicted times per NFE.

    ``calibration``: tau and delta (seconds) measured independently of the run, e.g. by
    :func:`spec_lib.costmodel.time_forward_rows` and :func:`~spec_lib.costmodel.fit_cost` on
    the same model; without it they are fitted on the run's own steady-state calls (every
    call but the prompt-processing first one) of both methods.  ``within_5_percent`` says
    whether the observed ratio is within 5% of the prediction.  Pass one slice's rows for a
    per-slice check.
    """
    from .costmodel import fit_cost

    both = runs[runs["method"].isin([method, baseline])]
    if calibration is None:
        calls = call_costs(both)
        steady = calls[calls["call"] > 0]
        if steady["rows"].nunique() < 2:    # one row count: tau and delta cannot be told apart
            fit = {"tau": np.nan, "delta": np.nan}
            source = f"run's steady-state calls (one row count, {steady['rows'].unique().tolist()}: no fit)"
        else:
            fit, source = fit_cost(steady), "run's steady-state calls"
    else:
        fit, source = calibration, "independent calibration"
    agg = aggregate(both, by=("method",)).set_index("method")
    rows = {m: sum(sum(r) for r in both.loc[both["method"] == m, "rows_per_call"]) / agg.loc[m, "nfe"]
            for m in (method, baseline)}
    overhead = {m: (agg.loc[m, "wall"] - agg.loc[m, "model"]) / agg.loc[m, "nfe"] for m in (method, baseline)}
    per_nfe = {m: fit["tau"] + fit["delta"] * rows[m] + overhead[m] for m in (method, baseline)}
    tokens_ratio = agg.loc[method, "tokens_per_nfe"] / agg.loc[baseline, "tokens_per_nfe"]
    predicted = tokens_ratio * per_nfe[baseline] / per_nfe[method]
    observed = agg.loc[method, "throughput"] / agg.loc[baseline, "throughput"]
    return {"method": method, "baseline": baseline, "calibration": source, "tau_ms": 1e3 * fit["tau"],
            "delta_ms": 1e3 * fit["delta"], "rows_per_call": rows,
            "non_model_ms_per_nfe": {m: 1e3 * v for m, v in overhead.items()},
            "tokens_per_nfe_ratio": tokens_ratio, "predicted_throughput_ratio": predicted,
            "observed_throughput_ratio": observed, "relative_error": observed / predicted - 1,
            "within_5_percent": bool(abs(observed / predicted - 1) <= 0.05)}    # False when there is no fit


def cost_model_table(runs: pd.DataFrame, method: str, baseline: str, calibration: dict | None) -> pd.DataFrame:
    """:func:`cost_model_check` per slice and over all slices, with tau and delta from the
    independent ``calibration`` and from the run's own steady-state calls."""
    rows = []
    for name, part in list(runs.groupby("slice", sort=False)) + [("all", runs)]:
        for source, given in (("independent", calibration), ("own calls", None)):
            if source == "independent" and given is None:
                continue
            rows.append({"slice": name, "tau_delta_from": source,
                         **cost_model_check(part, method, baseline, calibration=given)})
    return pd.DataFrame(rows)


def speedups(agg: pd.DataFrame, reference: str = "ar") -> pd.DataFrame:
    """``agg`` (from :func:`aggregate`) with ``speedup`` = throughput / the reference's, per slice."""
    out = agg.copy()
    ref = out[out["method"] == reference].set_index("slice")["throughput"]
    out["speedup"] = out["throughput"] / out["slice"].map(ref)
    return out


def best_per_schedule(agg: pd.DataFrame, metric: str = "throughput") -> pd.DataFrame:
    """Per schedule (other than ``ar``), the row of its best width by ``metric``."""
    spec = agg[agg["schedule"] != "ar"]
    return spec.loc[spec.groupby("schedule", sort=False)[metric].idxmax()].reset_index(drop=True)


def decode_all(model, prompt, schedules, **kwargs) -> dict[str, DecodeResult]:
    """One :func:`spec_lib.decode` per schedule on the same prompt and arguments."""
    return {schedule: decode(model, prompt, schedule=schedule, **kwargs) for schedule in schedules}


def decode_summary(results: dict[str, DecodeResult]) -> dict:
    """Tokens, NFE, accepted per iteration and rows per call of single decodes (for results JSON)."""
    return {s: {"tokens": len(r.tokens), "nfe": r.nfe, "accepted": r.accepted, "rows_per_call": r.rows_per_call}
            for s, r in results.items()}


def decode_table(results: dict[str, DecodeResult], reference: str | None = "ar") -> pd.DataFrame:
    """One row per schedule of single decodes: tokens, NFE, tokens/NFE, rows per call,
    accepted per iteration; ``identical`` compares tokens with ``results[reference]``."""
    rows = []
    ref_tokens = results[reference].tokens if reference in results else None
    for name, res in results.items():
        n = len(res.tokens)
        rows.append({"schedule": name, "tokens": n, "nfe": res.nfe,
                     "tokens_per_nfe": n / res.nfe if res.nfe else float("nan"),
                     "max_rows_per_call": max(res.rows_per_call, default=0),
                     "steady_rows_per_call": res.rows_per_call[-1] if res.rows_per_call else 0,
                     "accepted": " ".join(map(str, res.accepted)),
                     "identical": None if ref_tokens is None else res.tokens == ref_tokens,
                     "model_ms": 1e3 * res.model_seconds, "wall_ms": 1e3 * res.wall_seconds})
    return pd.DataFrame(rows)


def lookup(frame: pd.DataFrame, column: str, **where) -> float:
    """The one value of ``column`` in the row matching ``where`` (a clear error otherwise)."""
    mask = np.ones(len(frame), dtype=bool)
    for key, value in where.items():
        mask &= (frame[key] == value).to_numpy()
    rows = frame.loc[mask, column]
    if len(rows) != 1:
        raise KeyError(f"{len(rows)} rows match {where} (column {column!r})")
    return float(rows.iloc[0])


def best_speedup(agg: pd.DataFrame, slice_: str, reference: str = "ar") -> dict:
    """The fastest non-reference method on one slice and its throughput over the reference."""
    part = speedups(agg[agg["slice"] == slice_], reference)
    part = part[part["method"] != reference]
    best = part.loc[part["speedup"].idxmax()]
    return {"method": best["method"], "speedup": float(best["speedup"])}


def block_probe(runs: pd.DataFrame) -> pd.DataFrame:
    """Per method of a block-size probe (App. F.1): schedule, block size B = W + 1, throughput,
    tokens/NFE, NFE and tokens per response, and the largest rows per call after the first."""
    probe = aggregate(runs, by=("method",))
    probe["B"] = probe["width"] + 1
    probe["nfe_per_response"] = probe["nfe"] / probe["responses"]
    probe["tokens_per_response"] = probe["tokens"] / probe["responses"]
    steady = runs.groupby("method")["rows_per_call"].agg(lambda calls: max(max(c[1:] or c) for c in calls))
    probe["max_rows_per_call"] = probe["method"].map(steady)
    probe.loc[probe["schedule"] == "ar", "B"] = 1
    return probe


def cost_model_at_best(runs: pd.DataFrame, best: pd.DataFrame, calibration: dict | None,
                       baseline_schedule: str = "linear") -> pd.DataFrame:
    """:func:`cost_model_check` of every schedule's best method against the baseline
    schedule's best method (independent calibration and own calls)."""
    chosen = dict(zip(best["schedule"], best["method"]))
    rows = []
    for schedule, method in chosen.items():
        if schedule == baseline_schedule:
            continue
        for source, given in (("independent", calibration), ("own calls", None)):
            if source == "independent" and given is None:
                continue
            rows.append({"tau_delta_from": source, **cost_model_check(runs, method, chosen[baseline_schedule],
                                                                       calibration=given)})
    return pd.DataFrame(rows)


def timing_decomposition(runs: pd.DataFrame, baseline: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Seed 000, App. F.3: per slice and method, model and non-model (wall - model) time over
    the baseline's total on that slice; then the equal-weight mean over slices, each method's
    non-model time relative to the baseline's, and its non-model share of wall time."""
    parts = aggregate(runs)
    parts["non_model"] = parts["wall"] - parts["model"]
    total = parts[parts["method"] == baseline].set_index("slice")["wall"]
    parts["model_norm"] = parts["model"] / parts["slice"].map(total)
    parts["non_model_norm"] = parts["non_model"] / parts["slice"].map(total)
    decomposition = parts.groupby("method", sort=False)[["model_norm", "non_model_norm"]].mean()
    decomposition["total_norm"] = decomposition.sum(axis=1)
    decomposition["non_model_vs_baseline"] = decomposition["non_model_norm"] / decomposition.loc[baseline, "non_model_norm"]
    sums = parts.groupby("method", sort=False)[["non_model", "wall"]].sum()
    decomposition["non_model_share_of_wall"] = sums["non_model"] / sums["wall"]
    return parts, decomposition.reset_index()


def fastest(best: pd.DataFrame) -> dict:
    """The fastest schedule at its best block size (a row of :func:`best_per_schedule`)."""
    row = best.loc[best["throughput"].idxmax()]
    return {"schedule": row["schedule"], "method": row["method"], "B": int(row["B"]), "throughput": float(row["throughput"])}


def at_block(schedule: str, block: int) -> str:
    """The method name of a self-speculative schedule at block size B."""
    return Method(schedule, block - 1).name


def batch_throughput(target, drafter, prompts: list, *, batch_sizes, width: int, max_new_tokens: int,
                     eos_token_id: int | None = None, kv_cache: bool = True, progress: bool = True):
    """Tokens/s of ``ar`` and ``deer`` at each batch size (seed 001, Table 5), with a KV cache or,
    with ``kv_cache=False``, without one as the paper ran it (:func:`spec_lib.decode_batch`).

    The prompts are cut into consecutive batches of each size (a last partial batch is
    dropped, so every size decodes the same number of prompts only when it divides it);
    the two methods alternate batch by batch.  Returns ``(table, outputs)``: per
    (batch size, method) tokens, wall seconds and tokens/s; and per (batch size, method,
    prompt) the output tokens, for the identity check against batch size 1.
    """
    from ..decoding import decode_batch

    decode_batch(target, prompts[:2], schedule="drafted", width=width, max_new_tokens=8, drafter=drafter,
                 kv_cache=kv_cache)                                                              # warm-up
    rows, outputs = [], []
    jobs = [(size, start) for size in batch_sizes for start in range(0, len(prompts) - size + 1, size)]
    label = "batched decoding" if kv_cache else "batched decoding, no KV cache"
    for n, (size, start) in enumerate(tqdm(jobs, desc=label, disable=not progress)):
        chunk = prompts[start: start + size]
        for schedule in (("ar", "deer") if n % 2 == 0 else ("deer", "ar")):
            results = decode_batch(target, chunk, schedule=schedule, width=width, max_new_tokens=max_new_tokens,
                                   drafter=drafter if schedule == "deer" else None, eos_token_id=eos_token_id,
                                   kv_cache=kv_cache)
            rows.append({"batch": size, "method": schedule, **results[0].extras["batch"]})
            outputs += [{"batch": size, "method": schedule, "prompt": start + j, "output": tuple(r.tokens),
                         "accepted": tuple(r.accepted)} for j, r in enumerate(results)]
    table = pd.DataFrame(rows).groupby(["batch", "method"], sort=False)[["tokens", "wall_seconds", "cycles"]].sum()
    table["tokens_per_s"] = table["tokens"] / table["wall_seconds"]
    return table.reset_index(), pd.DataFrame(outputs)


def batch_identity(outputs):
    """Per (batch size, method): how many batched outputs equal the same prompt's batch-1 output."""
    single = outputs[outputs["batch"] == 1].set_index(["method", "prompt"])["output"]
    same = [out == single.get((m, p)) for m, p, out in zip(outputs["method"], outputs["prompt"], outputs["output"])]
    return outputs.assign(same=same).groupby(["batch", "method"])["same"].agg(same="sum", responses="size").reset_index()
