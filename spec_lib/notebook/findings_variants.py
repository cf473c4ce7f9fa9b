"""Findings of the Packed-SS variants of seed 000: any order (15), partial branches (16), a proposal-only LoRA (17).

Each function maps a notebook's published result (the JSON :func:`spec_lib.notebook.results.save_results`
writes) to a :class:`~spec_lib.notebook.findings.Report`; :data:`FINDINGS` names them by notebook.
"""

from __future__ import annotations

import functools
import math

from . import findings as f


def _ratio(row: dict, key: str = "throughput_ratio", digits: int = 2) -> str:
    """:func:`~spec_lib.notebook.findings.interval`, the throughput ratio unless ``key`` says otherwise."""
    return f.interval(row, key, digits)


def _above_one(row: dict, key: str = "throughput_ratio") -> str:
    return f.above_one(row[f"{key}_low"], row[f"{key}_high"])


def _below_one(low: float, high: float) -> str:
    """The verdict on "the ratio is below 1" from its interval."""
    return {"agrees": "disagrees", "disagrees": "agrees"}.get(f.above_one(low, high), "not resolved")


def _below_zero(low: float, high: float) -> str:
    """The verdict on "the difference is negative" from its interval."""
    return "agrees" if high < 0 else "disagrees" if low > 0 else "not resolved"




def _label(slice_name: str) -> str:
    """``"smax16 (W=8)"`` -> ``"smax16 at W=8"`` (no brackets inside a sentence's brackets)."""
    return slice_name.replace(" (", " at ").rstrip(")")


def any_order_setdlm(result: dict) -> f.Report:
    """``15_any_order_setdlm``: seed 000, Sec. 4.1 (SetDLM), App. F.5, F.6, Tables 8-10."""
    m = result["metrics"]

    def pairs(baseline: str) -> list[dict]:
        return [r for r in m["paired"] if r["baseline"] == baseline]

    def listed(rows: list[dict]) -> str:
        return "; ".join(f"{_label(r['slice'])} {_ratio(r)}" for r in rows)

    def points(r: dict) -> str:
        return f"{_label(r['slice'])} {f.num(r['diff_pp'], 0)} points {f.ci(r['low_pp'], r['high_pp'], 0)}"

    quad_ltr, quad_conf = pairs("quadratic/ltr"), pairs("quadratic/confidence")
    linear_ltr, linear_conf = pairs("linear/ltr"), pairs("linear/confidence")
    labels = m["ltr_labels"]
    problems = sum(r["prompts"] for r in labels)
    differ = sum(r["prompts_with_different_outputs"] for r in labels)
    rows = {(r["slice"], r["method"]): str(r["max_rows"]) for r in m["rows"]}
    slices = [r["slice"] for r in labels]
    accuracy = {(r["slice"], r["method"]): r for r in m["paired_accuracy"] if r["baseline"] == "packed/ltr"}
    confidence = [accuracy[s, "packed/confidence"] for s in slices if (s, "packed/confidence") in accuracy]
    native = [accuracy[s, "native"] for s in slices if (s, "native") in accuracy]
    effect = m["order_effect"]
    latency = "; ".join(f"{_label(r['slice'])} {'+' * (r['latency_change'] > 0)}{f.pct(r['latency_change'])}"
                        for r in effect)
    faster = ["agrees" if r["latency_change"] < 0 else "disagrees" if r["latency_change"] > 0 else "not resolved"
              for r in effect]
    headline = (f"In LTR order Packed-SS runs at {' and '.join(_ratio(r) for r in quad_ltr)} Quadratic-SS's throughput "
                f"but {' and '.join(_ratio(r) for r in linear_ltr)} Linear-SS's "
                f"({', '.join(_label(r['slice']) for r in linear_ltr)}), and the three LTR schedules' outputs agree on "
                f"{problems - differ} of {problems} problems.")
    findings = [
        f.Finding("The three LTR schedules give identical per-example correctness labels (seed 000, F.5, F.6; outputs "
                  "differ on 5 and 13 of 1,319 questions)",
                  f"identical labels on {sum(r['identical_labels'] for r in labels)} of {len(labels)} checkpoints; "
                  f"outputs differ on {differ} of {problems} problems",
                  "agrees" if all(r["identical_labels"] for r in labels) else "disagrees"),
        f.Finding("Packed-SS has higher throughput than Quadratic-SS at both windows and in both orders, 2.20× at "
                  "W = 16 in confidence order (seed 000, Sec. 4.1, F.5, Table 10)",
                  f"Packed / Quadratic throughput, LTR: {listed(quad_ltr)}; confidence: {listed(quad_conf)}; at most "
                  f"{' / '.join(rows.get((s, 'packed/ltr'), 'n/a') for s in slices)} rows per call against "
                  f"{' / '.join(rows.get((s, 'quadratic/ltr'), 'n/a') for s in slices)}",
                  f.combine([_above_one(r) for r in quad_ltr + quad_conf])),
        f.Finding("In LTR order Packed-SS improves Linear-SS's throughput by 6.0% (W = 8) and 1.5% (W = 16), "
                  "tokens/NFE +8.5-8.9% outweighing time/NFE +2.7-7.0% (seed 000, Sec. 4.1, Tables 8 and 10)",
                  f"Packed / Linear throughput: {listed(linear_ltr)}; tokens/NFE "
                  f"{f.span([r['tokens_per_nfe_ratio'] for r in linear_ltr])}×, time/NFE "
                  f"{f.span([r['time_per_nfe_ratio'] for r in linear_ltr])}×",
                  f.combine([_above_one(r) for r in linear_ltr])),
        f.Finding("In confidence order Packed-SS improves Linear-SS's throughput by 10.2% and 12.8%, every paired "
                  "interval above one (seed 000, F.5, Table 10)",
                  f"Packed / Linear throughput: {listed(linear_conf)}",
                  f.combine([_above_one(r) for r in linear_conf])),
        f.Finding("Confidence ordering lowers Packed-SS's latency (-4.1% and -13.1%) but costs accuracy (68.39% to "
                  "65.35%, 66.57% to 59.06%) (seed 000, F.5)",
                  f"accuracy, confidence minus LTR: {'; '.join(points(r) for r in confidence)}; latency change: "
                  f"{latency} (no interval)",
                  f.combine([_below_zero(r["low_pp"], r["high_pp"]) for r in confidence] + faster)),
        f.Finding("SetDLM's native threshold decoder scores below the LTR schedules, by 8.72 [6.37, 11.07] and "
                  "7.05 [4.78, 9.33] points (seed 000, Sec. 4.1, F.6)",
                  f"native minus Packed-SS (LTR): {'; '.join(points(r) for r in native)}",
                  f.combine([_below_zero(r["low_pp"], r["high_pp"]) for r in native])),
    ]
    return f.Report(headline, findings)


def partial_branch(result: dict) -> f.Report:
    """``16_partial_branch``: seed 000, Sec. 5 (its open design between Packed-SS and Quadratic-SS)."""
    m, p = result["metrics"], result["parameters"]
    path, ex, c = m["pathwise"], m["exactness"], m["counterexample"]
    violations = sum(r["violations"] for r in path)
    pairs = sum(r["instances"] for r in path)
    policies = len({r["policy"] for r in path})
    losses = "; ".join(f"W = {w}: " + f.span([100 * r["instances_partial_loses"] / r["instances"]
                                               for r in m["search"] if r["width"] == w], 0) + "%"
                       for w in dict.fromkeys(r["width"] for r in m["search"]))
    first = (f"first found: W = {c['width']}, L = {c['length']}, policy {c['policy']}, {c['nfe_partial']} passes "
             f"against Packed-SS's {c['nfe_packed']}") if c else "none found"
    correct = [r for r in m["sampling"] if r["role"] == "correct"]
    controls = [r for r in m["sampling"] if r["role"] == "negative control"]
    fits = bool(correct) and all(min(r["chi2_p"], r["g_p"]) > p.get("alpha_pass", 1e-3) for r in correct)
    caught = bool(controls) and all(max(r["chi2_p"], r["g_p"]) < p.get("alpha_fail", 1e-6) for r in controls)
    control = f"p = {max(max(r['chi2_p'], r['g_p']) for r in controls):.2g}" if controls else "not run"
    partial = [r for r in m["vs_packed"] if r["method"].startswith("partial")]
    by_method: dict[str, list[dict]] = {}
    for r in partial:
        by_method.setdefault(r["method"], []).append(r)
    best = max(by_method, key=lambda k: sum(r["throughput_ratio"] for r in by_method[k]) / len(by_method[k]))
    others = [r for r in partial if r["method"] != best]
    quadratic = [r["throughput_ratio"] for r in m["vs_packed"] if r["method"].startswith("quadratic")]
    spec = [r for r in m["calls"] if r["schedule"] != "ar"]
    fitted = "; ".join(f"{name} {f.span([r[f'measured / predicted ({name})'] for r in spec])}"
                       for name in m["calibrations"])
    winners = "; ".join(f"{name} at {f.num(m['marks'][name], 0)}: {w}" if math.isfinite(m["marks"][name])
                        else f"{name}: not measured" for name, w in m["winners"].items())
    headline = (f"Under Assumption 3.1 partial-branch shows {violations} violations of NFE_partial ≤ NFE_Packed over "
                f"{pairs:,} scripted drafter-policy pairs and {ex['identical']} of {ex['responses']} greedy outputs "
                f"equal AR's, and its fastest policy on the trained model, {best}, runs at "
                f"{f.span([r['throughput_ratio'] for r in by_method[best]])}× Packed-SS's throughput.")
    findings = [
        f.Finding("A partial-branch call holds Packed-SS's 2B rows plus B rows per branch, 2B + sB for s branches (the "
                  "project's design for seed 000's Sec. 5 open question)",
                  f"{sum(r['rows'] == r['formula'] for r in m['rows'])} of {len(m['rows'])} layouts "
                  f"(B = {', '.join(str(b) for b in dict.fromkeys(r['B'] for r in m['rows']))}) match the formula",
                  "agrees" if all(r["rows"] == r["formula"] for r in m["rows"]) else "disagrees"),
        f.Finding("Under Assumption 3.1 partial-branch never needs more forward passes than Packed-SS, at any L (the "
                  "project's question; seed 000 Sec. 3's pathwise argument, extended)",
                  f"{violations} violations over {pairs // max(policies, 1):,} scripted drafters × {policies} "
                  f"policies; "
                  f"fewer passes at some L in {sum(r['instances_better'] for r in path):,} of {pairs:,} (drafter, "
                  f"policy) pairs; median pass ratio at L = {p.get('pathwise_length', 'max')} "
                  f"{f.span([r['nfe_ratio_median'] for r in path])}, minimum "
                  f"{f.num(min(r['nfe_ratio_min'] for r in path))}",
                  "agrees" if violations == 0 else "disagrees"),
        f.Finding("Without Assumption 3.1 the guarantee fails: partial-branch can need more passes than Packed-SS "
                  "(the project's question)",
                  f"random correctness tables where partial-branch loses at some L: {losses}; {first}",
                  "agrees" if c is not None and c["nfe_partial"] > c["nfe_packed"] else "not resolved"),
        f.Finding("Partial-branch is lossless: greedy outputs equal AR's and samples follow the target law, while the "
                  "`branch_argmax` control is rejected (seed 000 Sec. 3.2's exactness, carried over)",
                  f"greedy: {ex['identical']} of {ex['responses']} identical, {ex['divergences']} divergences; "
                  f"sampling: {len(correct)} configurations, chi-square and G p = "
                  f"{f.span([v for r in correct for v in (r['chi2_p'], r['g_p'])])}; control {control}",
                  f.combine(["agrees" if ok else "disagrees" for ok in (ex["ok"], fits, caught)])),
        f.Finding("Do the branches pay on this machine, is some policy faster than Packed-SS at the same B? (seed 000 "
                  "Sec. 5 leaves it open)",
                  f"fastest policy {best}: " + "; ".join(f"{r['slice']} {_ratio(r)}" for r in by_method[best])
                  + f" (tokens/NFE {f.span([r['tokens_per_nfe_ratio'] for r in by_method[best]])}×); "
                  f"{sum(r['throughput_ratio_high'] < 1 for r in others)} of {len(others)} other partial-branch rows "
                  f"slower (CI below 1); Quadratic-SS {f.span(quadratic)}×",
                  f.combine([_above_one(r) for r in by_method[best]])),
        f.Finding("Which schedule is fastest moves with tau/delta, a call's fixed cost in rows (seed 000 Sec. 1's cost "
                  "model tau + delta n)",
                  f"model time per call, measured / predicted: {fitted}; predicted fastest at {winners}",
                  "measured"),
    ]
    return f.Report(headline, findings)


def proposal_lora(result: dict) -> f.Report:
    """``17_proposal_lora``: seed 000, App. F.2, Tables 4-5."""
    m = result["metrics"]
    ident = m["identity"]
    same, total = sum(r["identical"] for r in ident), sum(r["responses"] for r in ident)
    slices = list(dict.fromkeys(r["slice"] for r in m["drafter_accuracy"]))
    first = {(r["model"], r["slice"]): r["accuracy"] for r in m["drafter_accuracy"] if r["offset"] == 1}
    without = [first.get(("AR base, no adapter", s), math.nan) for s in slices]
    adapted = [first.get(("AR base + LoRA", s), math.nan) for s in slices]
    leading = {(r["model"], r["slice"]): r["expected_correct_leading"] for r in m["expected_correct_leading"]}
    training = m["training"]
    trained = (f"; adapter ({training['adapter_parameters']:,} parameters) trained in "
               f"{f.num(training['adapter_minutes'], 1)} min") if "adapter_minutes" in training else ""
    ratios = {r["lm"]: r for r in m["packed_vs_linear"]}
    lora = [r for lm, r in ratios.items() if lm.startswith("LoRA")]
    paper = ratios["LoRA paper"]
    t4 = {(r["lm"], r["schedule"]): r["nfe"] for r in m["table4"]}
    t5 = {r["schedule"]: r for r in m["table5"] if r["lm"] == "LoRA paper"}
    expected = {"packed": lambda b: (2 * b, b), "quadratic": lambda b: (b * (b + 1), b * b), "linear": lambda b: (b, b)}
    rows_ok = len(t5) == 3 and all((r["evaluated"], r["selected"]) == expected[s](r["B"]) for s, r in t5.items())
    cheaper = t5["packed"]["model_ms_per_iteration"] < t5["linear"]["model_ms_per_iteration"]
    lean = [r for r in m["lean_vs_paper"] if r["schedule"] != "linear"]      # Linear-SS skips no row

    def by_slice(values) -> str:
        return "/".join(f.num(v) for v in values)

    headline = (f"A proposal-only LoRA on a frozen AR base lifts offset-1 draft accuracy from {by_slice(without)} to "
                f"{by_slice(adapted)} ({'/'.join(slices)}) while {same} of {total} greedy outputs stay the base "
                f"model's AR output, and Packed-SS then runs at {_ratio(paper)} Linear-SS's throughput.")
    findings = [
        f.Finding("A proposal-only adapter changes the drafting while preserving the AR verifier (seed 000, App. F.2)",
                  f"target logits bitwise the base model's in {sum(m['bitwise'].values())} of {len(m['bitwise'])} "
                  f"adapter modes ({', '.join(m['bitwise'])}); greedy outputs equal AR's on {same} of {total}, "
                  f"{sum(r['divergences'] for r in ident)} divergences",
                  "agrees" if all(m["bitwise"].values()) and all(r["ok"] for r in ident) else "disagrees"),
        f.Finding("The adapter alone makes the frozen AR model a drafter (seed 000, App. F.2, with the Nemotron "
                  "authors' adapter; here one trained on an AR model that never saw a MASK token)",
                  f"offset-1 accuracy {by_slice(without)} without the adapter, {by_slice(adapted)} with it "
                  f"({'/'.join(slices)}); expected correct leading proposals "
                  f"{by_slice(leading.get(('AR base + LoRA', s), math.nan) for s in slices)} (dual-mode model: "
                  f"{by_slice(leading.get(('dual-mode (10)', s), math.nan) for s in slices)}){trained}",
                  "agrees" if sum(adapted) > sum(without) and all(a >= b for a, b in zip(adapted, without))
                  else "disagrees"),
        f.Finding("With the adapter Packed-SS cuts Linear-SS's NFE by 12.0% yet is 3.0% slower, throughput ratio 0.978 "
                  "[0.969, 0.987] (seed 000, App. F.2, Table 4)",
                  "Packed / Linear throughput: " + "; ".join(f"{r['lm']} {_ratio(r)}" for r in lora)
                  + f" (LoRA paper: NFE {f.pct(t4['LoRA paper', 'packed'] / t4['LoRA paper', 'linear'] - 1)}, "
                  f"tokens/NFE {f.times(paper['tokens_per_nfe_ratio'])}, "
                  f"time/NFE {f.times(paper['time_per_nfe_ratio'])})"
                  f"; dual-mode model {_ratio(ratios['dual-mode']) if 'dual-mode' in ratios else 'n/a'}",
                  f.combine([_below_one(r["throughput_ratio_low"], r["throughput_ratio_high"]) for r in lora])),
        f.Finding("Adapter rows evaluated / applied: Packed-SS 64 / 32, Quadratic-SS 72 / 64, Linear-SS 32 / 32; "
                  "Packed-SS's model time per iteration is below Linear-SS's, 32.37 vs 56.77 ms (seed 000, App. F.2, "
                  "Table 5)",
                  "; ".join(f"{s} (B = {r['B']}) {r['evaluated']} / {r['selected']} rows, "
                            f"{f.num(r['model_ms_per_iteration'], 1)} ms per iteration" for s, r in t5.items()),
                  f.combine(["agrees" if rows_ok else "disagrees", "agrees" if cheaper else "disagrees"])),
        f.Finding("Computing the update only for the rows it is applied to saves App. F.2's extra LoRA work (the "
                  "project's lean variant against the paper's)",
                  "lean / paper model time per call: " + "; ".join(
                      f"{r['schedule']} {f.times(r['ratio'], r['ratio_low'], r['ratio_high'], 3)}"
                      for r in m["lean_vs_paper"]),
                  f.combine([_below_one(r["ratio_low"], r["ratio_high"]) for r in lean]) if lean else "measured"),
    ]
    return f.Report(headline, findings)


FINDINGS = {"15_any_order_setdlm": any_order_setdlm, "16_partial_branch": partial_branch,
            "17_proposal_lora": proposal_lora}

#: ``show(notebook, profile)`` displays ``notebook``'s findings (:func:`spec_lib.notebook.findings.show`).
show = functools.partial(f.show, FINDINGS)
