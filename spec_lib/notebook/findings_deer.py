"""Findings of the DEER notebooks (seed 001): 20-22.

Each function maps a notebook's published result (the JSON :func:`spec_lib.notebook.results.save_results`
writes) to a :class:`~spec_lib.notebook.findings.Report`; :data:`FINDINGS` names them by notebook.
"""

from __future__ import annotations

import functools
import math

from . import findings as f




def _ratio(a, b) -> float:
    a, b = f.number(a), f.number(b)
    return a / b if b else float("nan")


def _greater(a, b) -> str:
    """The verdict on "a exceeds b" from two point estimates (``not resolved`` when one is missing)."""
    a, b = f.number(a), f.number(b)
    if math.isnan(a) or math.isnan(b):
        return "not resolved"
    return "agrees" if a > b else "disagrees"








def _p(p) -> str:
    """A p-value: two significant digits, ``< 1e-300`` where it underflowed to 0, ``n/a`` when missing."""
    p = f.number(p)
    if math.isnan(p):
        return "n/a"
    return "< 1e-300" if p == 0 else f"{p:.2g}"




#: how the findings name the methods of notebook 21 (the first word of a method's name)
_NAMES = {"ar": "AR", "deer": "DEER", "ar_draft": "AR drafter"}


def deer_alignment(result: dict) -> f.Report:
    """``20_deer_alignment``: seed 001, Sec. 3.1 (D2A alignment), Table 3 (Stage II) and Figure 6 (alpha)."""
    m = result["metrics"]
    ablation = m["stage2_ablation"]
    by_slice = {r["slice"]: r for r in ablation}
    code = by_slice.get("code", ablation[0])

    def stages(variant: str) -> str:
        return "; ".join(f"{s} {f.num(r[f'{variant} Stage I'])} → {f.num(r[f'{variant} Stage I + II'])} "
                         f"({f.signed(r[f'stage2_gain {variant}'])})" for s, r in by_slice.items())

    def stage2_verdict(variant: str) -> str:
        return f.combine([_greater(r[f"{variant} Stage I + II"], r[f"{variant} Stage I"]) for r in ablation])

    alphas: dict = {}
    for r in m["alpha_sensitivity"]:
        alphas.setdefault(r["variant"], []).append(r)
    for rows in alphas.values():
        rows.sort(key=lambda r: r["alpha"])

    def per_alpha(key: str, digits: int = 2) -> str:
        return "; ".join(f"R_max = {rows[0]['r_max']}: " + " / ".join(f.num(r[key], digits) for r in rows)
                         for rows in alphas.values())

    alpha_list = " / ".join(f.num(r["alpha"]) for r in next(iter(alphas.values())))
    written = [_ratio(r["faithful Stage I + II"], r["cpu-scale Stage I + II"]) for r in ablation]
    headline = (f"Aligned with the cpu-scale D2A objectives, the {f.num(m['record']['drafter_parameters'] / 1e6)}M "
                f"diffusion drafter accepts τ = {f.num(code['cpu-scale Stage I + II'])} drafts per cycle on "
                f"{code['slice']} (k = {result['parameters']['block']}; {f.num(code['pre-trained dLLM'])} before "
                f"alignment), Stage II adding {f.signed(code['stage2_gain cpu-scale'])} over Stage I, while the "
                f"objectives as written reach {f.span(written)}× the cpu-scale τ.")
    findings = [
        f.Finding("D2A alignment turns a masked-diffusion LM into a prefix-conditioned drafter (seed 001, Sec. 3.1)",
                  "τ before alignment → after Stage I + II (cpu-scale): " + "; ".join(
                      f"{s} {f.num(r['pre-trained dLLM'])} → {f.num(r['cpu-scale Stage I + II'])}"
                      for s, r in by_slice.items()),
                  f.combine([_greater(r["cpu-scale Stage I + II"], r["pre-trained dLLM"]) for r in ablation])),
        f.Finding("Stage II raises τ over Stage I: +0.13 to +1.20 on four code benchmarks, Qwen3-30B-A3B (seed 001, "
                  "Table 3); here with the cpu-scale objectives",
                  f"τ Stage I → Stage I + II: {stages('cpu-scale')} (point estimates)",
                  stage2_verdict("cpu-scale")),
        f.Finding("The same with the objectives as written: Stage I on the whole answer, Stage II at the answer's "
                  "end with R_max = 96 (seed 001, Sec. 3.4, Table 3)",
                  f"τ Stage I → Stage I + II: {stages('faithful')} (point estimates)", stage2_verdict("faithful")),
        f.Finding("Larger alpha makes Stage II noisier: the first/last weight ratio alpha^(R-1) is 2.57 at 1.01 and "
                  "103 at 1.05 for R = 96 (seed 001, Figure 6)",
                  f"alpha {alpha_list}: weight ratio {per_alpha('weight_ratio_first_last')}; late-training loss "
                  f"std {per_alpha('late_train_loss_std')}; largest gradient norm {per_alpha('max_grad_norm', 1)}",
                  f.combine([_greater(rows[-1]["late_train_loss_std"], rows[0]["late_train_loss_std"])
                             for rows in alphas.values()])),
        f.Finding("At alpha = 1.05 the Stage II loss diverges (seed 001, Figure 6)",
                  "held-out weighted loss at the largest alpha, first → last evaluation: " + "; ".join(
                      f"R_max = {rows[-1]['r_max']} {f.num(rows[-1]['first_heldout_loss'])} → "
                      f"{f.num(rows[-1]['last_heldout_loss'])}" for rows in alphas.values()),
                  f.combine([_greater(rows[-1]["last_heldout_loss"], rows[-1]["first_heldout_loss"])
                             for rows in alphas.values()])),
        f.Finding("Project question: at this scale, how do the objectives as written compare with the cpu-scale ones?",
                  "τ after Stage I + II, as written / cpu-scale: " + "; ".join(
                      f"{s} {f.times(x)}" for s, x in zip(by_slice, written)), "measured"),
    ]
    return f.Report(headline, findings)


def _kind(method: str) -> str:
    """``"ar"``, ``"deer"`` or ``"ar_draft"`` from a method's name (``"deer k=8 (compiled)"``)."""
    return method.split()[0]


def deer_decoding(result: dict) -> f.Report:
    """``21_deer_decoding``: seed 001, Sec. 4 (Tables 1, 2, 5; Figures 7, 8) and App. E (losslessness)."""
    m = result["metrics"]
    ex, path_ex, peer = m["exactness"], m["path_exactness"], m["peer"]
    main: dict = {}                                      # {temperature: {slice: {kind: row}}}
    for r in m["main"]:
        main.setdefault(r["temperature"], {}).setdefault(r["slice"], {})[_kind(r["method"])] = r
    temperatures = sorted(main)
    greedy = main[temperatures[0]]
    name = "code" if "code" in greedy else next(iter(greedy))
    code = greedy[name]
    same = sum(r["same"] for r in m["batch_identity"]), sum(r["responses"] for r in m["batch_identity"])
    paths = list(dict.fromkeys(r["path"] for r in m["path_ratios"]))
    lossless = (ex["ok"] and path_ex["ok"] and same[0] == same[1]
                and peer["identical_outputs"] == peer["responses"])
    faster = f.above_one(code["deer"]["speedup_low"], code["deer"]["speedup_high"]) == "agrees"
    headline = (f"{ex['identical']} of {ex['responses']} greedy DEER and AR-drafter outputs equal AR's; DEER "
                f"(τ = {f.num(code['deer']['tau'])} on {name}) is {'' if faster else 'not '}faster than AR: "
                f"{f.interval(code['deer'], 'speedup')} on {name}, where the AR drafter reaches "
                f"{f.interval(code['ar_draft'], 'speedup')}.")

    sweep: dict = {}                                     # {k: {kind: tau}}
    for r in m["block_sweep"]:
        if r["method"] != "ar":
            sweep.setdefault(int(r["width"]), {})[_kind(r["method"])] = r["tau"]
    early: dict = {}                                     # {kind: [acceptance at positions 1, 2]}
    for r in sorted(m["position_acceptance"], key=lambda r: r["position"]):
        if r["position"] <= 2:
            early.setdefault(_NAMES[_kind(r["method"])], []).append(f.num(r["probability"]))
    tau = (f"T = {f.num(temperatures[0], 1)}, k = {result['parameters']['block']}, τ DEER / AR drafter: "
           + ", ".join(f"{s} {f.num(r['deer']['tau'])} / {f.num(r['ar_draft']['tau'])}" for s, r in greedy.items())
           + f"; block sweep k = {' / '.join(map(str, sweep))}: "
           + ", ".join(f"{_NAMES[kind]} " + " / ".join(f.num(v.get(kind)) for v in sweep.values())
                       for kind in ("deer", "ar_draft"))
           + f"; acceptance at draft positions 1, 2 (k = {max(sweep)}): "
           + ", ".join(f"{kind} {' and '.join(v)}" for kind, v in early.items()))
    tau_verdicts = ([_greater(r["deer"]["tau"], r["ar_draft"]["tau"]) for r in greedy.values()]
                    + ["agrees" if above else "disagrees" for above in m["deer_tau_above_ar_drafter_k_ge_8"].values()])

    resurgence = {_kind(r["method"]): r for r in m["resurgence"]}
    deer = resurgence["deer"]
    resurgence_verdict = ("agrees" if deer["resurgence"] else
                          "not resolved" if deer["cycles_top"] >= deer["cycles_below"] else "disagrees")

    compiling: dict = {}                                 # {kind: [compiled / eager throughput ratios]}
    for r in m["path_ratios"]:
        if r["comparison"] == "compiled / eager":
            compiling.setdefault(_NAMES[_kind(r["method"])], []).append(r["throughput_ratio"])

    findings = [
        f.Finding("Speculative decoding with DEER's drafter is lossless: greedy outputs equal the target's AR output "
                  "(seed 001, App. E, Thm. E.2)",
                  f"{ex['identical']} of {ex['responses']} identical ({ex['explained_by_ties']} divergences explained "
                  f"by ties); on the {' and '.join(paths)} path{'s' if len(paths) > 1 else ''}: "
                  f"{path_ex['identical']} of {path_ex['responses']}; batched: "
                  f"{same[0]} of {same[1]} equal to batch 1; transformers' assisted generation with the same AR "
                  f"drafter: {peer['identical_outputs']} of {peer['responses']} identical (the project's ar_draft "
                  f"{f.times(f.number(peer['ar_draft_over_assisted']), *map(f.number, peer['ci']))} its tokens/s)",
                  "agrees" if lossless else "disagrees"),
        f.Finding("DEER is faster than AR decoding: 2.77-4.04× at T = 0 (seed 001, Table 2) and 2.52-3.62× at "
                  "T = 0.6 (Table 1), means over code benchmarks for 4B-30B targets",
                  "; ".join(f"T = {f.num(t, 1)}: DEER " + ", ".join(f"{s} {f.interval(r['deer'], 'speedup')}"
                                                                      for s, r in main[t].items())
                            + " (AR drafter " + ", ".join(f"{s} {f.interval(r['ar_draft'], 'speedup')}"
                                                           for s, r in main[t].items()) + ")"
                            for t in temperatures),
                  f.combine([f.above_one(r["deer"]["speedup_low"], r["deer"]["speedup_high"])
                             for t in temperatures for r in main[t].values()])),
        f.Finding("DEER accepts more drafts per cycle than an AR drafter (the EAGLE-3 role), at every block size: "
                  "τ 4.61-5.03 vs 3.05-3.54 (seed 001, Table 2; Figure 8)", tau, f.combine(tau_verdicts)),
        f.Finding("DEER's acceptance lengths rise again near the block size, the long-block resurgence (seed 001, "
                  "Figure 7, App. B.1)",
                  "cycles accepting " + "; ".join(
                      f"{_NAMES[kind]} {r['top_band'][0]}-{r['top_band'][1]} vs {r['below_band'][0]}-"
                      f"{r['below_band'][1]} drafts: {r['cycles_top']} vs {r['cycles_below']} (p = {_p(r['p_value'])})"
                      for kind, r in resurgence.items()),
                  resurgence_verdict),
        f.Finding("DEER's batched throughput beats AR's: 2.44-4.17× at batch 2-16, no KV cache there (seed 001, "
                  "Sec. 4.4, Table 5)",
                  "DEER / AR tokens/s (one timing each): " + "; ".join(
                      f"batch {r['batch']} {f.times(_ratio(r['deer'], r['ar']))} ({f.num(r['deer'], 0)} vs "
                      f"{f.num(r['ar'], 0)})" for r in m["batch_throughput"]),
                  f.combine([_greater(r["deer"], r["ar"]) for r in m["batch_throughput"]])),
        f.Finding("Project question: DEER against AR on each execution path (compiled: static cache, compiled "
                  "drafters)",
                  "DEER / AR tokens/s: " + "; ".join(f"{r['path']} {r['slice']} {f.interval(r, 'throughput_ratio')}"
                                                     for r in m["path_ratios"] if r["comparison"] != "compiled / eager")
                  + ("; compiling speeds up " + ", ".join(f"{kind} {f.span(v)}×" for kind, v in compiling.items())
                     if compiling else ""),
                  "measured"),
    ]
    repetition = f.repetition(m, list(dict.fromkeys(r["method"] for r in m["main"] if _kind(r["method"]) != "ar")))
    return f.Report(headline, findings if repetition is None else [*findings, repetition])


def deer_exact_sampling(result: dict) -> f.Report:
    """``22_deer_exact_sampling``: seed 001, Sec. 3.4 (Eq. 5-6) and App. E, Thm. E.2 (losslessness)."""
    m, params = result["metrics"], result["parameters"]
    alpha_pass, alpha_fail = params["alpha_pass"], params["alpha_fail"]

    def larger_p(r: dict) -> float:                      # the larger of the two tests' p (NaN if one is missing)
        chi2, g = f.number(r["chi2_p"]), f.number(r["g_p"])
        return float("nan") if math.isnan(chi2) or math.isnan(g) else max(chi2, g)

    def passes(r: dict) -> bool:                         # both tests above alpha_pass (the notebook's check)
        return f.number(r["chi2_p"]) > alpha_pass and f.number(r["g_p"]) > alpha_pass

    def rejected(r: dict) -> bool:                       # both tests below alpha_fail
        return f.number(r["chi2_p"]) < alpha_fail and f.number(r["g_p"]) < alpha_fail

    def fits(schedule: str | None, role: str) -> list[dict]:
        return [r for r in m["fits"] if r["role"] == role and schedule in (None, r["schedule"])]

    def fit_text(rows: list[dict]) -> str:
        return "; ".join(f"{r['label']} T = {f.num(r['temperature'], 1)}: chi-square p {_p(r['chi2_p'])}, G p "
                         f"{_p(r['g_p'])}, TV {f.num(r['tv'], 3)} (99% noise {f.num(r['tv_noise_99'], 3)})"
                         for r in rows)

    deer, ar_draft, controls = fits("deer", "correct"), fits("ar_draft", "correct"), fits(None, "negative control")
    largest = [larger_p(r) for r in controls]
    worst = max(largest) if largest and not any(map(math.isnan, largest)) else float("nan")
    caught = sum(map(rejected, controls))
    chi2 = [p for p in (f.number(r["chi2_p"]) for r in deer) if not math.isnan(p)] or [float("nan")]
    temperatures = " and ".join(f.num(t, 1) for t in sorted({r["temperature"] for r in deer}))
    fit = "fits" if deer and all(map(passes, deer)) else "does not fit"
    headline = (f"On {f.num(m['fits'][0]['n'], 0)} sampled continuations per configuration, DEER's speculative "
                f"sampling {fit} the enumerated AR law at T = {temperatures} (chi-square p {_p(min(chi2))} to "
                f"{_p(max(chi2))}, top-2 truncated q included), and {caught} of {len(controls)} no-residual "
                f"controls are rejected (largest p {'< 1e-300' if worst == 0 else _p(worst)}).")
    findings = [
        f.Finding("DEER's sampling is lossless: its outputs follow the target's AR law (seed 001, Sec. 3.4, Eq. 5-6; "
                  "App. E, Thm. E.2), here also with a top-2 truncated q, outside the theorem's support condition; "
                  f"a pass: both tests' p above {alpha_pass:g}",
                  f"drafters' chain at mean TV {f.num(m['target_drafter_tv'])} from the target's; {fit_text(deer)}",
                  "agrees" if fit == "fits" else "disagrees"),
        f.Finding("The AR-drafter baseline's speculative sampling is lossless too (Leviathan et al., 2023, cited in "
                  "seed 001, Sec. 2)", fit_text(ar_draft),
                  "agrees" if ar_draft and all(map(passes, ar_draft)) else "disagrees"),
        f.Finding("Without the residual distribution (Eq. 6) the law is biased toward the drafter, and the test "
                  f"sees it (seed 001, Sec. 3.4); caught: both tests' p below {alpha_fail:g}",
                  f"{caught} of {len(controls)} controls rejected: " + "; ".join(
                      f"{r['label']} T = {f.num(r['temperature'], 1)}: p {_p(larger_p(r))}, "
                      f"TV {f.num(r['tv'], 3)}" for r in controls),
                  "agrees" if controls and caught == len(controls) else "disagrees"),
    ]
    return f.Report(headline, findings)


FINDINGS = {"20_deer_alignment": deer_alignment, "21_deer_decoding": deer_decoding,
            "22_deer_exact_sampling": deer_exact_sampling}

#: ``show(notebook, profile)`` displays ``notebook``'s findings (:func:`spec_lib.notebook.findings.show`).
show = functools.partial(f.show, FINDINGS)
