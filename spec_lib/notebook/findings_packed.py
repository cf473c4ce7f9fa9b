"""Findings of the Packed-SS decoding notebooks of seed 000 ("One Call Ahead"): the model (10) and 11-14.

Each function maps a notebook's published result (the JSON :func:`spec_lib.notebook.results.save_results`
writes) to a :class:`~spec_lib.notebook.findings.Report`; :data:`FINDINGS` names them by notebook.
"""

from __future__ import annotations

import functools
import math

from . import findings as f


def _rows(metrics: dict, key: str, **match) -> list[dict]:
    return [r for r in metrics[key] if all(r.get(k) == v for k, v in match.items())]






def _above(row: dict, key: str) -> str:
    """:func:`~spec_lib.notebook.findings.above_one` on ``row[key]``'s interval (no interval: not resolved)."""
    return f.above_one(f.number(row[f"{key}_low"]), f.number(row[f"{key}_high"]))


def _per_slice(rows: list[dict], key: str) -> str:
    return "; ".join(f"{r['slice']} {f.interval(r, key)}" for r in rows)




def _error(row: dict) -> str:
    """The cost model's relative error as a percentage, or "no fit" where the run could fit none."""
    error = f.number(row["relative_error"])
    return "no fit" if math.isnan(error) else f.pct(error, 1)


def _cost_verdict(rows: list[dict]) -> str:
    """The cost model's prediction within 5% of the observed ratio (``relative_error``) on every
    row that has one; ``not resolved`` where no row has a fit."""
    errors = [abs(f.number(r["relative_error"])) for r in rows if not math.isnan(f.number(r["relative_error"]))]
    within = sum(e <= 0.05 for e in errors)
    if not errors:
        return "not resolved"
    return "agrees" if within == len(errors) else "mixed" if within else "disagrees"


def _with_repetition(findings: list[f.Finding], m: dict, methods: list[str]) -> list[f.Finding]:
    """``findings`` and, where the result has a repetition report, the row that reads its tokens per
    iteration beside the repetition of the text (:func:`spec_lib.notebook.findings.repetition`)."""
    row = f.repetition(m, methods)
    return findings if row is None else [*findings, row]


def _exactness(ex: dict) -> f.Finding:
    """Greedy outputs against AR's (``metrics["exactness"]``)."""
    return f.exactness(ex, "Every schedule's greedy output is token-identical to AR greedy decoding (seed 000, Sec. 3)")


def train_self_speculative_model(result: dict) -> f.Report:
    """``10_train_self_speculative_model``: seed 000, Sec. 2.2 (shared-weight drafting and verification), App. D.1."""
    m = result["metrics"]
    by_model: dict[str, dict] = {}
    for r in m["ablation"]:
        by_model.setdefault(r["model"], {})[r["slice"]] = r
    final = by_model["final"]
    block = next(iter(final.values()))["width"] + 1
    names = " / ".join(final)

    def column(rows: dict, key: str) -> str:
        return " / ".join(f.num(rows[s][key]) for s in final if s in rows)

    leading = {r["slice"]: r["expected_correct_leading"] for r in m["expected_correct_leading"]
               if r["model"] == "final"}
    losses_fell = result["checks"]["ar_loss_decreased"] and result["checks"]["diffusion_loss_decreased"]
    headline = (f"A {f.num(m['record']['parameters'] / 1e6, 1)}M-parameter model trained here (held-out AR perplexity "
                f"{f.num(m['heldout_perplexity'], 1)}) drafts for itself: Linear-SS at B = {block} accepts "
                f"{column(final, 'linear_tokens_per_iteration')} tokens per iteration on {names}, on greedy text of "
                f"which {f.span([r['repetition'] for r in final.values()])} of tokens repeat an earlier 4-gram.")
    findings = [
        f.Finding("One set of weights trained jointly on AR and block-diffusion losses both drafts and verifies, "
                  "through attention masks alone (seed 000, Sec. 2.2, App. D.1; here: both losses fall and a fresh "
                  "draft's expected run of correct leading tokens is at least 1 on every slice)",
                  f"losses fell: AR {'yes' if result['checks']['ar_loss_decreased'] else 'no'}, diffusion "
                  f"{'yes' if result['checks']['diffusion_loss_decreased'] else 'no'}; held-out AR CE "
                  f"{f.num(m['heldout_ar_ce'])} (perplexity {f.num(m['heldout_perplexity'], 1)}), diffusion CE "
                  f"{f.num(m['heldout_diffusion_ce'])}; correct leading tokens per fresh draft: "
                  + "; ".join(f"{s} {f.num(v)}" for s, v in leading.items()),
                  "agrees" if losses_fell and min(leading.values()) >= 1 else "disagrees"),
        f.Finding(f"Does Linear-SS at B = {block} beat AR in tokens/s with this model (the project's question at this "
                  "scale)", "final model over AR: " + "; ".join(
                      f"{s} {f.times(r['linear_speedup_over_ar'])}" for s, r in final.items()), "measured"),
    ]
    if len(by_model) > 1:
        findings.append(f.Finding(
            "Which training stages and stage-2 choices raise Linear-SS's acceptance, read beside the repetition of "
            "the text it is earned on (the project's ablation rows; the paper trains no model)",
            f"Linear-SS tokens per iteration (repetition) on {names}: " + "; ".join(
                f"{model} {column(rows, 'linear_tokens_per_iteration')} ({column(rows, 'repetition')})"
                for model, rows in by_model.items()), "measured"))
    findings.append(f.Finding(
        "Quadratic-SS's branch blocks draft as well as the [last, MASK^W] block on the same positions, so "
        "Packed-versus-Quadratic comparisons measure the schedules, not training coverage (the project's check)",
        "offset accuracy, branch minus linear: " + "; ".join(
            f"{r['slice']} {f.num(r['difference'], 4)} {f.ci(r['difference_low'], r['difference_high'], 4)}"
            for r in m["branch_blocks"]), "measured"))
    return f.Report(headline, findings)


def packed_ss_greedy(result: dict) -> f.Report:
    """``11_packed_ss_greedy``: seed 000, Sec. 4.1, Fig. 3, Tables 6 and 12."""
    m = result["metrics"]
    ex = m["exactness"]
    packed = next(r["method"] for r in m["ratios_to_linear"] if r["method"].startswith("packed"))
    eager = _rows(m, "ratios_to_linear", method=packed)
    by_slice = {r["slice"]: r for r in eager}
    tokens = "; ".join(f"{s} {f.times(r['tokens_per_nfe_ratio'], r['tokens_per_nfe_ratio_low'], r['tokens_per_nfe_ratio_high'])}"
                       for s, r in by_slice.items())
    speed = "; ".join(f"{s} {f.times(r['throughput_ratio'], r['throughput_ratio_low'], r['throughput_ratio_high'])}"
                      for s, r in by_slice.items())
    tokens_verdict = f.combine([f.above_one(r["tokens_per_nfe_ratio_low"], r["tokens_per_nfe_ratio_high"])
                                for r in by_slice.values()])
    speed_verdict = f.combine([f.above_one(r["throughput_ratio_low"], r["throughput_ratio_high"])
                               for r in by_slice.values()])
    cost = [r for r in m["cost_model_check"] if r["tau_delta_from"] == "independent"]
    within = sum(r["within_5_percent"] for r in cost)
    best = m["best_speculative_over_ar"]
    code = by_slice.get("code", next(iter(by_slice.values())))
    headline = (f"All {ex['identical']} of {ex['responses']} speculative greedy outputs equal AR's; Packed-SS reaches "
                f"{f.times(code['tokens_per_nfe_ratio'])} Linear-SS's tokens/NFE on code, and "
                f"{f.times(code['throughput_ratio'], code['throughput_ratio_low'], code['throughput_ratio_high'])} "
                f"its throughput.")
    findings = [
        f.Finding("Every schedule's greedy output is token-identical to AR greedy decoding (seed 000, Sec. 3)",
                  f"{ex['identical']} of {ex['responses']} responses identical, {ex['divergences']} divergences "
                  f"({ex['explained_by_ties']} explained by ties of gap ≤ {ex['tie_gap']})",
                  "agrees" if ex["ok"] else "disagrees"),
        f.Finding("Packed-SS needs fewer forward calls per token than Linear-SS: +13.4 to +20.3% tokens/NFE "
                  "(seed 000, Sec. 4.1, Table 6)", f"Packed / Linear tokens/NFE: {tokens}", tokens_verdict),
        f.Finding("Packed-SS is faster than Linear-SS in tokens/s (seed 000, Sec. 4.1, Fig. 3)",
                  f"Packed / Linear throughput: {speed}", speed_verdict),
        f.Finding("The cost model tau + delta·rows predicts the throughput ratio (seed 000, Sec. 1)",
                  f"within 5% of the prediction on {within} of {len(cost)} slices (tau, delta timed independently)",
                  "agrees" if within == len(cost) else "mixed" if within else "disagrees"),
        f.Finding("Speculative decoding beats AR in tokens/s (the project's question at this scale)",
                  "best schedule per slice over AR: " + "; ".join(
                      f"{s} {r['method']} {f.times(r['speedup'])}" for s, r in best.items()),
                  "measured"),
    ]
    return f.Report(headline, _with_repetition(findings, m, [packed, eager[0]["baseline"]]))


def packed_ss_sampling(result: dict) -> f.Report:
    """``12_packed_ss_sampling``: seed 000, Sec. 4.2, Fig. 4, Tables 7 and 13."""
    m = result["metrics"]
    packed = next(r for r in m["ratios_to_linear"] if r["method"].startswith("packed"))["method"]
    rows = _rows(m, "ratios_to_linear", method=packed)
    code = next((r for r in rows if r["slice"] == "code"), rows[0])
    faster = [_above(r, "throughput_ratio") for r in rows]
    absolute = {}
    for r in m["absolute"]:
        absolute.setdefault(r["slice"], {})[r["method"]] = r
    best = {s: max((r for k, r in by.items() if k != "ar"), key=lambda r: r["throughput"])
            for s, by in absolute.items()}
    over_ar = {s: (r["method"], r["throughput"] / absolute[s]["ar"]["throughput"]) for s, r in best.items()}
    ar_fastest = sum(v < 1 for _, v in over_ar.values())
    linear = {s: next(r for k, r in by.items() if k.startswith("linear")) for s, by in absolute.items()}
    quadratic = m["packed_vs_quadratic"]
    below = sum(_above(r, "throughput_ratio") == "disagrees" for r in quadratic)
    above = sum(_above(r, "throughput_ratio") == "agrees" for r in quadratic)
    slices = [r for r in m["cost_model_check"] if r["tau_delta_from"] == "independent" and r["slice"] != "all"]
    pooled = [r for r in m["cost_model_check"] if r["tau_delta_from"] == "independent" and r["slice"] == "all"]
    headline = (f"At temperature 1 Packed-SS yields {f.times(code['tokens_per_nfe_ratio'])} Linear-SS's tokens/NFE and "
                f"{f.interval(code, 'throughput_ratio')} its throughput on {code['slice']}, with a throughput CI above 1 "
                f"on {faster.count('agrees')} of {len(rows)} slices, while plain AR is faster than every speculative "
                f"schedule on {ar_fastest} of {len(over_ar)} slices.")
    findings = [
        f.Finding("Packed-SS yields more tokens per NFE than Linear-SS at temperature 1: +14.8 to +21.5% "
                  "(seed 000, Sec. 4.2, Table 7)",
                  f"Packed / Linear tokens/NFE: {_per_slice(rows, 'tokens_per_nfe_ratio')} (time per NFE "
                  f"{f.span([r['time_per_nfe_ratio'] for r in rows])}×)",
                  f.combine([_above(r, "tokens_per_nfe_ratio") for r in rows])),
        f.Finding("Packed-SS is faster than Linear-SS at temperature 1, every CI above one: +2.0 to +6.3% "
                  "(seed 000, Sec. 4.2, Fig. 4, Table 13)",
                  f"Packed / Linear throughput: {_per_slice(rows, 'throughput_ratio')}", f.combine(faster)),
        f.Finding("Packed-SS remains competitive with Quadratic-SS at temperature 1: CIs above one in 3, below in 2, "
                  "containing one in 5 of 10 settings (seed 000, Sec. 4.2, Table 13; here: disagrees only if every "
                  "slice's CI lies below one)",
                  f"Packed / Quadratic throughput: {_per_slice(quadratic, 'throughput_ratio')} (CI above one on "
                  f"{above}, below one on {below} of {len(quadratic)} slices)",
                  "disagrees" if below == len(quadratic) else "agrees"),
        f.Finding("The cost model tau + delta·rows predicts the Packed/Linear throughput ratio, here within 5% per "
                  "slice (seed 000, Sec. 1)",
                  "relative error with tau, delta timed independently: " + "; ".join(
                      f"{r['slice']} {_error(r)}" for r in slices)
                  + "".join(f"; all slices pooled {_error(r)}" for r in pooled), _cost_verdict(slices)),
        f.Finding("Speculative decoding beats AR in tokens/s at temperature 1 (the project's question at this scale)",
                  "fastest speculative schedule per slice over AR: " + "; ".join(
                      f"{s} {method} {f.times(v)}" for s, (method, v) in over_ar.items())
                  + f"; Linear-SS tokens per iteration {f.span([r['tokens_per_iteration'] for r in linear.values()])}, "
                  f"repeated tokens {f.span([100 * r['repetition'] for r in m['absolute']], 0)}%", "measured"),
    ]
    return f.Report(headline, _with_repetition(findings, m, [packed, rows[0]["baseline"]]))


def block_size_probe(result: dict) -> f.Report:
    """``13_block_size_probe``: seed 000, App. F.1, Table 3 (and Sec. 4.1's block sizes)."""
    m = result["metrics"]
    best, fastest, top = m["best_block"], m["fastest"], m["best_throughput"]
    probed = {(r["schedule"], r["B"]) for r in m["probe"]}
    paper = {"linear": 32, "packed": 32, "quadratic": 8}

    def block_verdict(schedule: str) -> str:
        if (schedule, paper[schedule]) not in probed:
            return "not resolved"
        return "agrees" if best.get(schedule) == paper[schedule] else "disagrees"

    at_best = m["speedups_at_best"]
    vs_linear = m["packed_vs_linear_at_best"]
    independent = [r for r in m["cost_model_at_best"] if r["tau_delta_from"] == "independent"]
    own = [r for r in m["cost_model_at_best"] if r["tau_delta_from"] == "own calls"]
    compiled = [r for r in m["speedups_by_path"] if r["path"] == "compiled"]
    headline = (f"Best block sizes by tokens/s: Linear B = {best['linear']}, Packed B = {best['packed']}, Quadratic "
                f"B = {best['quadratic']}, within {f.pct(1 - min(top.values()) / max(top.values()), 1)} of each other "
                f"at the top ({fastest['method']} fastest, {f.num(fastest['throughput'], 1)} tokens/s), every schedule "
                f"{f.span([r['throughput_ratio'] for r in at_best])}× AR there.")
    findings = [
        f.Finding("B = 32 for Linear-SS and Packed-SS and B = 8 for Quadratic-SS give the highest throughput among the "
                  "block sizes probed (seed 000, Sec. 4.1, App. F.1, Table 3)",
                  "best B: " + ", ".join(f"{s} {b}" for s, b in best.items()) + " (probed: " + "; ".join(
                      f"{s} " + "/".join(str(b) for t, b in sorted(probed) if t == s) for s in paper) + ")",
                  f.combine([block_verdict(s) for s in paper])),
        f.Finding("Packed-SS is faster than Linear-SS at the same block size (seed 000, Sec. 4.1, Table 12)",
                  f"{vs_linear[0]['method']} / {vs_linear[0]['baseline']} throughput: "
                  f"{_per_slice(vs_linear, 'throughput_ratio')}; tokens/NFE "
                  + ", ".join(f.times(r["tokens_per_nfe_ratio"]) for r in vs_linear) + ", time per NFE "
                  + ", ".join(f.times(r["time_per_nfe_ratio"]) for r in vs_linear),
                  f.combine([_above(r, "throughput_ratio") for r in vs_linear])),
        f.Finding("The cost model tau + delta·rows predicts each best schedule's throughput ratio to the best "
                  "Linear-SS, here within 5% (seed 000, Sec. 1)",
                  "relative error with tau, delta timed independently: " + "; ".join(
                      f"{r['method']} / {r['baseline']} {_error(r)}" for r in independent)
                  + "; fitted on the run's own calls: " + "; ".join(f"{r['method']} {_error(r)}" for r in own),
                  _cost_verdict(independent)),
        f.Finding("Each schedule at its best block size beats AR in tokens/s (the project's question at this scale)",
                  "over AR: " + "; ".join(
                      f"{r['slice']} {r['method']} {f.interval(r, 'throughput_ratio')}" for r in at_best),
                  "measured"),
        _exactness(m["exactness"]),
    ]
    if compiled:
        findings.insert(4, f.Finding(
            "Does compiling (static cache) change the best block sizes or the speedups over AR (the project's "
            "question)",
            "compiled path, best B and speedup over the compiled AR: " + "; ".join(
                f"{r['slice']} {r['method']} {f.interval(r, 'throughput_ratio')}" for r in compiled), "measured"))
    return f.Report(headline, _with_repetition(findings, m, list(dict.fromkeys(r["method"] for r in at_best))))


def timing_decomposition(result: dict) -> f.Report:
    """``14_timing_decomposition``: seed 000, App. F.3, Fig. 5 (and Sec. 1's cost model on each execution path)."""
    m = result["metrics"]
    eager = {r["method"].split()[0]: r for r in m["decomposition"] if not r["method"].endswith("(compiled)")}
    linear, packed, quadratic = eager["linear"], eager["packed"], eager["quadratic"]
    costs = m["cost_model_by_path"]
    pairs = [r for r in m["ratios"] if r["method"].startswith("packed") and r["baseline"].startswith("linear")]
    compiled = [r for r in m["decomposition"] if r["method"].endswith("(compiled)")]
    gains: dict[str, list[float]] = {}
    for r in m["ratios"]:
        if r["comparison"] == "compiled / eager":
            gains.setdefault(r["method"].removesuffix(" (compiled)"), []).append(r["throughput_ratio"])
    headline = (f"On the eager path Packed-SS spends {f.num(packed['model_norm'])} of Linear-SS's time in model calls "
                f"and {f.times(packed['non_model_vs_baseline'])} its non-model decoder time (total "
                f"{f.num(packed['total_norm'])}), and the decoder's own time is "
                f"{f.span([100 * r['non_model_share_of_wall'] for r in eager.values()], 1)}% of wall for every "
                "schedule.")
    findings = [
        f.Finding("Packed-SS cuts model execution time below Linear-SS's: 0.860 and 0.854 of its total at 3B and 8B "
                  "(seed 000, App. F.3, Fig. 5)",
                  f"model time over Linear-SS's total: Packed-SS {f.num(packed['model_norm'])}, Quadratic-SS "
                  f"{f.num(quadratic['model_norm'])}, Linear-SS {f.num(linear['model_norm'])}",
                  "agrees" if packed["model_norm"] < linear["model_norm"] else "disagrees"),
        f.Finding("Packed-SS and Quadratic-SS spend more non-model decoder time than Linear-SS: about 1.4× and "
                  "2.7-2.9× (seed 000, App. F.3)",
                  f"non-model time over Linear-SS's: Packed-SS {f.times(packed['non_model_vs_baseline'])}, "
                  f"Quadratic-SS {f.times(quadratic['non_model_vs_baseline'])}",
                  f.combine(["agrees" if r["non_model_vs_baseline"] > 1 else "disagrees"
                             for r in (packed, quadratic)])),
        f.Finding("Packed-SS's total stays below Linear-SS's (0.964, 0.951) while Quadratic-SS's exceeds it "
                  "(1.106, 1.062) (seed 000, App. F.3, Fig. 5)",
                  f"total over Linear-SS's: Packed-SS {f.num(packed['total_norm'])}, Quadratic-SS "
                  f"{f.num(quadratic['total_norm'])}",
                  f.combine(["agrees" if packed["total_norm"] < 1 else "disagrees",
                             "agrees" if quadratic["total_norm"] > 1 else "disagrees"])),
        f.Finding("The cost model tau + delta·rows, fitted on each execution path's own calls, predicts the "
                  "Packed/Linear throughput ratio, here within 5% (seed 000, Sec. 1)", "; ".join(
                      f"{r['path']}: tau {f.num(f.number(r['tau_ms']))} ms, delta {f.num(f.number(r['delta_ms']), 3)} ms/row "
                      f"(tau/delta {f.num(f.number(r['tau_over_delta']), 0)} rows), predicted "
                      f"{f.times(f.number(r['predicted_throughput_ratio']), digits=3)}, observed "
                      f"{f.times(f.number(r['observed_throughput_ratio']), digits=3)}" for r in costs),
                  _cost_verdict(costs)),
        f.Finding("What compiling (static cache) buys each method, Packed-SS over Linear-SS on each execution path, "
                  "and whether compiled AR beats every speculative schedule (the project's question)",
                  ("compiled / eager throughput: " + ", ".join(f"{k} {f.span(v)}×" for k, v in gains.items()) + "; "
                   if gains else "") + "Packed / Linear: " + "; ".join(
                      f"{r['path']} {r['slice']} {f.interval(r, 'throughput_ratio')}" for r in pairs)
                  + ("; compiled totals over eager Linear-SS's: " + ", ".join(
                      f"{r['method'].removesuffix(' (compiled)')} {f.num(r['total_norm'])}" for r in compiled)
                     if compiled else ""), "measured"),
        _exactness(m["exactness"]),
    ]
    return f.Report(headline, findings)


FINDINGS = {"10_train_self_speculative_model": train_self_speculative_model, "11_packed_ss_greedy": packed_ss_greedy,
            "12_packed_ss_sampling": packed_ss_sampling, "13_block_size_probe": block_size_probe,
            "14_timing_decomposition": timing_decomposition}

#: ``show(notebook, profile)`` displays ``notebook``'s findings (:func:`spec_lib.notebook.findings.show`).
show = functools.partial(f.show, FINDINGS)
