"""The findings of notebooks 15-17 (:mod:`spec_lib.notebook.findings_variants`): each report carries the
numbers of the committed cpu result, its verdicts follow the numbers (negative controls edit a copy of the
result until a claim turns), and a reduced result (smoke-sized, NaN intervals) still reports."""

from __future__ import annotations

import copy

import pytest

from spec_lib.notebook import findings
from spec_lib.notebook.findings_variants import FINDINGS, any_order_setdlm, partial_branch, proposal_lora

NAN = float("nan")


@pytest.fixture(scope="module")
def committed():
    return {notebook: findings.read_result(notebook, "cpu") for notebook in FINDINGS}


def text(made: findings.Report) -> str:
    return " ".join([made.headline] + [f"{x.claim} {x.measured}" for x in made.findings])


def verdict(made: findings.Report, claim: str) -> str:
    """The verdict of the one finding whose claim contains ``claim``."""
    (found,) = [x for x in made.findings if claim in x.claim]
    return found.verdict


def interval(value: float, low: float, high: float) -> str:
    return f"{value:.2f}× [{low:.2f}, {high:.2f}]"


def well_formed(made: findings.Report) -> None:
    assert made.headline and "\n" not in made.headline and "|" not in made.headline
    assert 2 <= len(made.findings) <= 6
    for x in made.findings:
        assert x.verdict in findings.VERDICTS
        assert "|" not in x.claim + x.measured and "\n" not in x.claim + x.measured
        assert "nan" not in x.measured.lower().split(), x.measured


def test_registered_for_their_notebooks():
    assert sorted(FINDINGS) == ["15_any_order_setdlm", "16_partial_branch", "17_proposal_lora"]


# ----- 15: any order on SetDLM ------------------------------------------------------------------

def test_any_order_reports_the_committed_numbers(committed):
    result = committed["15_any_order_setdlm"]
    m = result["metrics"]
    made = any_order_setdlm(result)
    well_formed(made)
    body = text(made)
    for r in m["paired"]:
        assert interval(r["throughput_ratio"], r["throughput_ratio_low"], r["throughput_ratio_high"]) in body
    problems = sum(r["prompts"] for r in m["ltr_labels"])
    agree = problems - sum(r["prompts_with_different_outputs"] for r in m["ltr_labels"])
    assert f"agree on {agree} of {problems} problems" in made.headline
    for r in m["paired_accuracy"]:
        if r["method"] in ("native", "packed/confidence"):
            assert f"{r['diff_pp']:.0f} points [{r['low_pp']:.0f}, {r['high_pp']:.0f}]" in body
    assert all(f"{100 * r['latency_change']:+.0f}%" in body for r in m["order_effect"])
    assert verdict(made, "identical per-example correctness labels") == "agrees"
    assert verdict(made, "higher throughput than Quadratic-SS") == "agrees"
    assert verdict(made, "In LTR order Packed-SS improves") == "disagrees"


def test_any_order_verdicts_follow_the_numbers(committed):
    result = copy.deepcopy(committed["15_any_order_setdlm"])
    m = result["metrics"]
    before = any_order_setdlm(result)
    for r in m["paired"]:
        if r["baseline"] == "linear/ltr":
            r.update(throughput_ratio=1.06, throughput_ratio_low=1.02, throughput_ratio_high=1.10)
        if r["baseline"] == "quadratic/confidence":
            r.update(throughput_ratio_low=0.9)
    m["ltr_labels"][0]["identical_labels"] = False
    for r in m["order_effect"]:
        r["latency_change"] = -0.05
    for r in m["paired_accuracy"]:
        if r["method"] in ("packed/confidence", "native"):
            r.update(diff_pp=-9.0, low_pp=-14.0, high_pp=-3.0)
    after = any_order_setdlm(result)
    assert verdict(before, "In LTR order Packed-SS improves") == "disagrees"
    assert verdict(after, "In LTR order Packed-SS improves") == "agrees"
    assert "1.06× [1.02, 1.10]" in after.headline
    assert verdict(after, "identical per-example correctness labels") == "disagrees"
    assert verdict(after, "higher throughput than Quadratic-SS") == "mixed"
    assert verdict(before, "Confidence ordering") == "mixed" and verdict(after, "Confidence ordering") == "agrees"
    assert verdict(before, "native threshold decoder") == "mixed"
    assert verdict(after, "native threshold decoder") == "agrees"


def test_any_order_reduced_result_reports(committed):
    """Smoke-sized: one checkpoint, NaN intervals (a bootstrap over too few prompts)."""
    result = copy.deepcopy(committed["15_any_order_setdlm"])
    m = result["metrics"]
    keep = m["ltr_labels"][0]["slice"]
    for key in ("absolute", "paired", "paired_accuracy", "ltr_labels", "order_effect", "rows"):
        m[key] = [r for r in m[key] if r["slice"] == keep]
    for r in m["paired"]:
        r.update(throughput_ratio_low=NAN, throughput_ratio_high=NAN)
    for r in m["paired_accuracy"]:
        r.update(low_pp=NAN, high_pp=NAN)
    made = any_order_setdlm(result)
    well_formed(made)
    assert "[n/a, n/a]" in made.headline
    assert verdict(made, "In LTR order Packed-SS improves") == "not resolved"
    assert verdict(made, "native threshold decoder") == "not resolved"


# ----- 16: partial-branch -----------------------------------------------------------------------

def fastest_partial(m: dict) -> tuple[str, list[dict]]:
    rows: dict[str, list[dict]] = {}
    for r in m["vs_packed"]:
        if r["method"].startswith("partial"):
            rows.setdefault(r["method"], []).append(r)
    best = max(rows, key=lambda k: sum(r["throughput_ratio"] for r in rows[k]) / len(rows[k]))
    return best, rows[best]


def test_partial_branch_reports_the_committed_numbers(committed):
    result = committed["16_partial_branch"]
    m = result["metrics"]
    made = partial_branch(result)
    well_formed(made)
    body = text(made)
    violations = sum(r["violations"] for r in m["pathwise"])
    pairs = sum(r["instances"] for r in m["pathwise"])
    better = sum(r["instances_better"] for r in m["pathwise"])
    assert f"shows {violations} violations" in made.headline and f"over {pairs:,} scripted" in made.headline
    assert f"{better:,} of {pairs:,}" in body
    ex = m["exactness"]
    assert f"{ex['identical']} of {ex['responses']} greedy outputs" in made.headline
    best, rows = fastest_partial(m)
    assert best in made.headline
    for r in rows:
        assert interval(r["throughput_ratio"], r["throughput_ratio_low"], r["throughput_ratio_high"]) in body
    c = m["counterexample"]
    assert f"{c['nfe_partial']} passes against Packed-SS's {c['nfe_packed']}" in body
    worst = max(r["instances_partial_loses"] / r["instances"] for r in m["search"])
    assert f"{100 * worst:.0f}%" in body
    p_values = [v for r in m["sampling"] if r["role"] == "correct" for v in (r["chi2_p"], r["g_p"])]
    assert f"p = {min(p_values):.2f}-{max(p_values):.2f}" in body
    assert all(w in body for w in m["winners"].values())
    assert [x.verdict for x in made.findings] == ["agrees"] * 4 + ["not resolved", "measured"]


def test_partial_branch_verdicts_follow_the_numbers(committed):
    result = copy.deepcopy(committed["16_partial_branch"])
    m = result["metrics"]
    m["pathwise"][0]["violations"] = 3
    m["rows"][0]["rows"] += 1
    m["counterexample"]["nfe_partial"] = m["counterexample"]["nfe_packed"]
    next(r for r in m["sampling"] if r["role"] == "negative control")["g_p"] = 0.4
    best, _ = fastest_partial(m)
    for r in m["vs_packed"]:
        if r["method"] == best:
            r.update(throughput_ratio=1.2, throughput_ratio_low=1.1, throughput_ratio_high=1.3)
    made = partial_branch(result)
    assert "shows 3 violations" in made.headline
    assert verdict(made, "2B + sB") == "disagrees"
    assert verdict(made, "never needs more forward passes") == "disagrees"
    assert verdict(made, "the guarantee fails") == "not resolved"
    assert verdict(made, "lossless") == "mixed"                     # greedy and the fits still pass
    assert verdict(made, "Do the branches pay") == "agrees"


def test_partial_branch_reduced_result_reports(committed):
    """Smoke-like: no counterexample found, calibrations that failed (NaN tau/delta), NaN intervals."""
    result = copy.deepcopy(committed["16_partial_branch"])
    m = result["metrics"]
    m["counterexample"] = None
    m["marks"] = {name: NAN for name in m["marks"]}
    m["winners"] = {name: "not measured (tau/delta = nan)" for name in m["winners"]}
    for r in m["vs_packed"]:
        r.update(throughput_ratio_low=NAN, throughput_ratio_high=NAN)
    for r in m["calls"]:
        for key in [k for k in r if k.startswith("measured / predicted")]:
            r[key] = NAN
    made = partial_branch(result)
    well_formed(made)
    assert "none found" in text(made) and "not measured" in text(made)
    assert verdict(made, "the guarantee fails") == "not resolved"
    assert verdict(made, "Do the branches pay") == "not resolved"


# ----- 17: proposal-only LoRA -------------------------------------------------------------------

def test_proposal_lora_reports_the_committed_numbers(committed):
    result = committed["17_proposal_lora"]
    m = result["metrics"]
    made = proposal_lora(result)
    well_formed(made)
    body = text(made)
    paper = next(r for r in m["packed_vs_linear"] if r["lm"] == "LoRA paper")
    assert interval(paper["throughput_ratio"], paper["throughput_ratio_low"], paper["throughput_ratio_high"]) \
        in made.headline
    same = sum(r["identical"] for r in m["identity"])
    total = sum(r["responses"] for r in m["identity"])
    assert f"{same} of {total} greedy outputs" in made.headline
    first = {(r["model"], r["slice"]): r["accuracy"] for r in m["drafter_accuracy"] if r["offset"] == 1}
    for model in ("AR base, no adapter", "AR base + LoRA"):
        assert "/".join(f"{first[model, s]:.2f}" for s in ("code", "stdlib", "math")) in made.headline
    for r in m["table5"]:
        if r["lm"] == "LoRA paper":
            assert f"{r['evaluated']} / {r['selected']} rows, {r['model_ms_per_iteration']:.1f} ms" in body
    for r in m["lean_vs_paper"]:
        assert f"{r['ratio']:.3f}× [{r['ratio_low']:.3f}, {r['ratio_high']:.3f}]" in body
    assert f"trained in {m['training']['adapter_minutes']:.1f} min" in body
    assert [x.verdict for x in made.findings] == ["agrees", "agrees", "disagrees", "agrees", "not resolved"]


def test_proposal_lora_verdicts_follow_the_numbers(committed):
    result = copy.deepcopy(committed["17_proposal_lora"])
    m = result["metrics"]
    for r in m["packed_vs_linear"]:
        r.update(throughput_ratio=0.978, throughput_ratio_low=0.969, throughput_ratio_high=0.987)
    m["bitwise"]["lean"] = False
    for r in m["drafter_accuracy"]:
        if r["model"] == "AR base + LoRA" and r["offset"] == 1:
            r["accuracy"] = 0.0
    next(r for r in m["table5"] if r["lm"] == "LoRA paper" and r["schedule"] == "packed")["evaluated"] = 32
    for r in m["lean_vs_paper"]:
        r.update(ratio=0.9, ratio_low=0.85, ratio_high=0.95)
    made = proposal_lora(result)
    assert "0.98× [0.97, 0.99]" in made.headline
    assert verdict(made, "preserving the AR verifier") == "disagrees"
    assert verdict(made, "a drafter") == "disagrees"
    assert verdict(made, "3.0% slower") == "agrees"
    assert verdict(made, "Adapter rows") == "mixed"                 # rows off, model time per iteration still lower
    assert verdict(made, "lean variant") == "agrees"


def test_proposal_lora_reduced_result_reports(committed):
    """An adapter trained elsewhere (no training record) and NaN intervals."""
    result = copy.deepcopy(committed["17_proposal_lora"])
    m = result["metrics"]
    m["training"] = {"trained_here": False}
    m["record"] = None
    for r in m["packed_vs_linear"]:
        r.update(throughput_ratio_low=NAN, throughput_ratio_high=NAN)
    for r in m["lean_vs_paper"]:
        r.update(ratio_low=NAN, ratio_high=NAN)
    made = proposal_lora(result)
    well_formed(made)
    assert "trained in" not in text(made)
    assert verdict(made, "3.0% slower") == "not resolved" and verdict(made, "lean variant") == "not resolved"
