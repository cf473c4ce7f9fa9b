"""The findings of notebooks 10-14 (:mod:`spec_lib.notebook.findings_packed`): each report carries
numbers this test reads from the committed result itself, each paper claim's verdict follows the
numbers (an edited result flips it), and a reduced result (fewer slices, no compiled path, no
interval, no cost fit: what a smoke run or ``compiled=False`` can publish) still builds."""

from __future__ import annotations

import copy

import pytest

from spec_lib.notebook import findings
from spec_lib.notebook import findings_packed as fp

NOTEBOOKS = ("10_train_self_speculative_model", "11_packed_ss_greedy", "12_packed_ss_sampling",
             "13_block_size_probe", "14_timing_decomposition")


def committed(notebook: str) -> dict:
    return findings.read_result(notebook, "cpu")


def make(notebook: str, result: dict) -> findings.Report:
    """The report, checked as the README and the notebooks need it."""
    made = findings.report(fp.FINDINGS, notebook, result)
    assert "\n" not in made.headline and "|" not in made.headline and made.headline.endswith(".")
    assert 2 <= len(made.findings) <= 8, len(made.findings)       # 8: with the repetition row and one more
    for finding in made.findings:
        assert "\n" not in finding.claim + finding.measured and "|" not in finding.claim + finding.measured
        assert "nan" not in finding.measured.lower().split(), finding.measured
        assert "nan" not in made.headline.lower().split()
    return made


def finding(made: findings.Report, words: str) -> findings.Finding:
    """The one finding whose claim contains ``words``."""
    found = [x for x in made.findings if words in x.claim]
    assert len(found) == 1, (words, [x.claim for x in made.findings])
    return found[0]


def x2(value: float) -> str:
    return f"{value:.2f}"


def ratio(row: dict, key: str) -> str:
    return f"{row[key]:.2f}× [{row[key + '_low']:.2f}, {row[key + '_high']:.2f}]"


def above_one(row: dict, key: str) -> str:
    low, high = row[key + "_low"], row[key + "_high"]
    return "agrees" if low > 1 else "disagrees" if high < 1 else "not resolved"


def one_verdict(verdicts: list[str]) -> str:
    return verdicts[0] if len(set(verdicts)) == 1 else "mixed"


def test_every_packed_notebook_has_findings():
    assert set(NOTEBOOKS) <= set(fp.FINDINGS)
    for notebook in NOTEBOOKS:
        assert fp.FINDINGS[notebook].__doc__.startswith(f"``{notebook}``: seed 000, ")


# ----- 10: the trained model --------------------------------------------------------------------

def test_10_report_of_the_committed_result():
    result = committed("10_train_self_speculative_model")
    m = result["metrics"]
    made = make("10_train_self_speculative_model", result)
    final = [r for r in m["ablation"] if r["model"] == "final"]
    assert f"{m['record']['parameters'] / 1e6:.1f}M" in made.headline
    assert f"perplexity {m['heldout_perplexity']:.1f}" in made.headline
    assert f"B = {final[0]['width'] + 1}" in made.headline
    assert " / ".join(x2(r["linear_tokens_per_iteration"]) for r in final) in made.headline
    shared = finding(made, "One set of weights")
    leading = [r for r in m["expected_correct_leading"] if r["model"] == "final"]
    for r in leading:
        assert f"{r['slice']} {x2(r['expected_correct_leading'])}" in shared.measured
    expected = all(result["checks"][k] for k in ("ar_loss_decreased", "diffusion_loss_decreased")) \
        and min(r["expected_correct_leading"] for r in leading) >= 1
    assert shared.verdict == ("agrees" if expected else "disagrees") == "agrees"
    ablation = finding(made, "ablation rows")
    for r in m["ablation"]:
        assert f"{r['model']} " in ablation.measured and x2(r["linear_tokens_per_iteration"]) in ablation.measured
    assert ablation.verdict == "measured"
    branch = finding(made, "branch blocks")
    for r in m["branch_blocks"]:
        assert f"{r['slice']} {r['difference']:.4f} [{r['difference_low']:.4f}, {r['difference_high']:.4f}]" \
            in branch.measured
    speed = finding(made, "beat AR")
    assert all(f"{r['slice']} {x2(r['linear_speedup_over_ar'])}×" in speed.measured for r in final)


def test_10_negative_controls():
    result = committed("10_train_self_speculative_model")
    weak = copy.deepcopy(result)
    for r in weak["metrics"]["expected_correct_leading"]:
        if r["model"] == "final" and r["slice"] == "code":
            r["expected_correct_leading"] = 0.4            # the drafter contributes less than a token
    assert finding(make("10_train_self_speculative_model", weak), "One set of weights").verdict == "disagrees"
    untrained = copy.deepcopy(result)
    untrained["checks"]["diffusion_loss_decreased"] = False
    made = make("10_train_self_speculative_model", untrained)
    assert finding(made, "One set of weights").verdict == "disagrees" and "diffusion no" in made.findings[0].measured


def test_10_reduced_result_builds():
    """No stage 1 or ablation rows, one slice, a branch study without spread (a smoke-sized run)."""
    result = copy.deepcopy(committed("10_train_self_speculative_model"))
    m = result["metrics"]
    m["ablation"] = [r for r in m["ablation"] if r["model"] == "final" and r["slice"] == "stdlib"]
    m["expected_correct_leading"] = [r for r in m["expected_correct_leading"]
                                     if r["model"] == "final" and r["slice"] == "stdlib"]
    m["branch_blocks"] = [dict(m["branch_blocks"][1], difference_low=None, difference_high=None)]
    made = make("10_train_self_speculative_model", result)
    assert len(made.findings) == 3 and "on stdlib" in made.headline
    assert "n/a" in finding(made, "branch blocks").measured


# ----- 11: greedy decoding (the worked example) ---------------------------------------------------

def test_11_report_of_the_committed_result():
    result = committed("11_packed_ss_greedy")
    m = result["metrics"]
    made = make("11_packed_ss_greedy", result)
    ex = m["exactness"]
    assert f"All {ex['identical']} of {ex['responses']}" in made.headline
    rows = [r for r in m["ratios_to_linear"] if r["method"].startswith("packed")]
    tokens = finding(made, "fewer forward calls")
    speed = finding(made, "faster than Linear-SS")
    for r in rows:
        assert f"{r['slice']} {ratio(r, 'tokens_per_nfe_ratio')}" in tokens.measured
        assert f"{r['slice']} {ratio(r, 'throughput_ratio')}" in speed.measured
    assert tokens.verdict == one_verdict([above_one(r, "tokens_per_nfe_ratio") for r in rows]) == "agrees"
    assert speed.verdict == one_verdict([above_one(r, "throughput_ratio") for r in rows]) == "mixed"
    assert finding(made, "token-identical").verdict == "agrees"


def test_11_negative_controls():
    result = copy.deepcopy(committed("11_packed_ss_greedy"))
    for r in result["metrics"]["ratios_to_linear"]:
        if r["method"].startswith("packed"):
            r["throughput_ratio_low"], r["throughput_ratio_high"] = 1.01, 1.2
    result["metrics"]["exactness"]["ok"] = False
    made = make("11_packed_ss_greedy", result)
    assert finding(made, "faster than Linear-SS").verdict == "agrees"
    assert finding(made, "token-identical").verdict == "disagrees"


# ----- 12: temperature 1 --------------------------------------------------------------------------

def test_12_report_of_the_committed_result():
    result = committed("12_packed_ss_sampling")
    m = result["metrics"]
    made = make("12_packed_ss_sampling", result)
    rows = [r for r in m["ratios_to_linear"] if r["method"] == "packed B=32"]
    code = next(r for r in rows if r["slice"] == "code")
    assert f"{x2(code['tokens_per_nfe_ratio'])}× Linear-SS's tokens/NFE" in made.headline
    assert ratio(code, "throughput_ratio") in made.headline
    by_slice: dict[str, list[dict]] = {}
    for r in m["absolute"]:
        by_slice.setdefault(r["slice"], []).append(r)
    ar_fastest = sum(max(r["throughput"] for r in rs if r["method"] != "ar")
                     < next(r for r in rs if r["method"] == "ar")["throughput"] for rs in by_slice.values())
    assert f"on {ar_fastest} of {len(by_slice)} slices." in made.headline
    tokens, speed = finding(made, "more tokens per NFE"), finding(made, "faster than Linear-SS")
    for r in rows:
        assert f"{r['slice']} {ratio(r, 'tokens_per_nfe_ratio')}" in tokens.measured
        assert f"{r['slice']} {ratio(r, 'throughput_ratio')}" in speed.measured
    assert tokens.verdict == one_verdict([above_one(r, "tokens_per_nfe_ratio") for r in rows]) == "agrees"
    assert speed.verdict == one_verdict([above_one(r, "throughput_ratio") for r in rows]) == "agrees"
    quadratic = finding(made, "competitive with Quadratic-SS")
    assert all(f"{r['slice']} {ratio(r, 'throughput_ratio')}" in quadratic.measured for r in m["packed_vs_quadratic"])
    assert quadratic.verdict == "agrees"
    cost = finding(made, "cost model")
    errors = {r["slice"]: r["relative_error"] for r in m["cost_model_check"] if r["tau_delta_from"] == "independent"}
    assert all(f"{100 * e:.1f}%" in cost.measured for e in errors.values())
    within = [abs(e) <= 0.05 for s, e in errors.items() if s != "all"]
    assert cost.verdict == ("agrees" if all(within) else "mixed" if any(within) else "disagrees") == "agrees"
    assert finding(made, "beats AR").verdict == "measured"


def test_12_negative_controls():
    result = committed("12_packed_ss_sampling")
    slower = copy.deepcopy(result)
    for r in slower["metrics"]["ratios_to_linear"]:
        if r["method"] == "packed B=32" and r["slice"] == "packages":
            r["throughput_ratio_low"], r["throughput_ratio_high"] = 0.85, 0.95
    assert finding(make("12_packed_ss_sampling", slower), "faster than Linear-SS").verdict == "mixed"
    behind = copy.deepcopy(result)
    for r in behind["metrics"]["packed_vs_quadratic"]:
        r["throughput_ratio_high"] = 0.97
    assert finding(make("12_packed_ss_sampling", behind), "competitive with Quadratic-SS").verdict == "disagrees"
    exact = copy.deepcopy(result)
    for r in exact["metrics"]["cost_model_check"]:
        r["relative_error"] = 0.01
    assert finding(make("12_packed_ss_sampling", exact), "cost model").verdict == "agrees"


def test_12_reduced_result_builds():
    """One slice, no intervals, no cost-model fit."""
    result = copy.deepcopy(committed("12_packed_ss_sampling"))
    m = result["metrics"]
    for key in ("absolute", "ratios_to_linear", "packed_vs_quadratic", "cost_model_check"):
        m[key] = [r for r in m[key] if r["slice"] in ("stdlib", "all")]
    for r in m["ratios_to_linear"] + m["packed_vs_quadratic"]:
        for key in list(r):
            if key.endswith(("_low", "_high")):
                r[key] = None
    for r in m["cost_model_check"]:
        r["relative_error"] = None
    made = make("12_packed_ss_sampling", result)
    assert "on stdlib" in made.headline and "of 1 slices" in made.headline
    assert finding(made, "faster than Linear-SS").verdict == "not resolved"
    assert finding(made, "cost model").verdict == "not resolved" and "no fit" in finding(made, "cost model").measured


# ----- 13: block sizes ----------------------------------------------------------------------------

def test_13_report_of_the_committed_result():
    result = committed("13_block_size_probe")
    m = result["metrics"]
    made = make("13_block_size_probe", result)
    best = m["best_block"]
    assert f"Linear B = {best['linear']}, Packed B = {best['packed']}, Quadratic B = {best['quadratic']}" \
        in made.headline
    top = m["best_throughput"]
    assert f"within {100 * (1 - min(top.values()) / max(top.values())):.1f}%" in made.headline
    assert f"{m['fastest']['throughput']:.1f} tokens/s" in made.headline
    blocks = finding(made, "give the highest throughput")
    paper = {"linear": 32, "packed": 32, "quadratic": 8}
    assert blocks.verdict == ("agrees" if best == paper else "disagrees") == "disagrees"
    vs = finding(made, "same block size")
    rows = m["packed_vs_linear_at_best"]
    assert all(f"{r['slice']} {ratio(r, 'throughput_ratio')}" in vs.measured for r in rows)
    assert vs.verdict == one_verdict([above_one(r, "throughput_ratio") for r in rows]) == "mixed"
    cost = finding(made, "cost model")
    independent = [r for r in m["cost_model_at_best"] if r["tau_delta_from"] == "independent"]
    assert all(f"{100 * r['relative_error']:.1f}%" in cost.measured for r in independent)
    assert cost.verdict == ("agrees" if all(abs(r["relative_error"]) <= 0.05 for r in independent) else "no")
    assert "no fit" in cost.measured          # Packed B = 8 and Linear B = 16: one row count, no own-call fit
    over_ar = finding(made, "beats AR")
    assert all(f"{r['slice']} {r['method']} {ratio(r, 'throughput_ratio')}" in over_ar.measured
               for r in m["speedups_at_best"])
    compiled = finding(made, "compiling")
    assert all(f"{r['slice']} {r['method']} {ratio(r, 'throughput_ratio')}" in compiled.measured
               for r in m["speedups_by_path"] if r["path"] == "compiled")
    assert finding(made, "token-identical").measured.startswith(
        f"{m['exactness']['identical']} of {m['exactness']['responses']}")


def test_13_negative_controls():
    result = committed("13_block_size_probe")
    as_paper = copy.deepcopy(result)
    as_paper["metrics"]["best_block"] = {"linear": 32, "packed": 32, "quadratic": 8}
    assert finding(make("13_block_size_probe", as_paper), "give the highest throughput").verdict == "agrees"
    unprobed = copy.deepcopy(as_paper)
    unprobed["metrics"]["probe"] = [r for r in unprobed["metrics"]["probe"] if r["B"] != 32]
    assert finding(make("13_block_size_probe", unprobed), "give the highest throughput").verdict == "mixed"
    faster = copy.deepcopy(result)
    for r in faster["metrics"]["packed_vs_linear_at_best"]:
        r["throughput_ratio_low"] = 1.02
    assert finding(make("13_block_size_probe", faster), "same block size").verdict == "agrees"
    off = copy.deepcopy(result)
    for r in off["metrics"]["cost_model_at_best"]:
        if r["tau_delta_from"] == "independent":
            r["relative_error"] = -0.12
    assert finding(make("13_block_size_probe", off), "cost model").verdict == "disagrees"


def test_13_reduced_result_builds():
    """``compiled=False`` (the eager path only), no intervals, no cost fit at all."""
    result = copy.deepcopy(committed("13_block_size_probe"))
    m = result["metrics"]
    m["probe_by_path"] = [r for r in m["probe_by_path"] if r["path"] == "eager"]
    m["speedups_by_path"] = [r for r in m["speedups_by_path"] if r["path"] == "eager"]
    m["compile_seconds"] = {}
    for r in m["speedups_at_best"] + m["packed_vs_linear_at_best"]:
        r["throughput_ratio_low"] = r["throughput_ratio_high"] = None
    for r in m["cost_model_at_best"]:
        r["relative_error"] = None
    made = make("13_block_size_probe", result)
    assert not [x for x in made.findings if "compiling" in x.claim]
    assert finding(made, "same block size").verdict == "not resolved"
    assert finding(made, "cost model").verdict == "not resolved"


# ----- 14: timing decomposition -------------------------------------------------------------------

def test_14_report_of_the_committed_result():
    result = committed("14_timing_decomposition")
    m = result["metrics"]
    made = make("14_timing_decomposition", result)
    table = {r["method"]: r for r in m["decomposition"]}
    linear, packed, quadratic = table["linear B=32"], table["packed B=32"], table["quadratic B=8"]
    assert f"{x2(packed['model_norm'])} of Linear-SS's time in model calls" in made.headline
    assert f"{x2(packed['non_model_vs_baseline'])}× its non-model decoder time" in made.headline
    assert f"total {x2(packed['total_norm'])}" in made.headline
    shares = [100 * r["non_model_share_of_wall"] for k, r in table.items() if not k.endswith("(compiled)")]
    assert f"{min(shares):.1f}-{max(shares):.1f}% of wall" in made.headline
    model = finding(made, "cuts model execution time")
    assert f"Packed-SS {x2(packed['model_norm'])}" in model.measured
    assert model.verdict == ("agrees" if packed["model_norm"] < linear["model_norm"] else "disagrees") == "agrees"
    non_model = finding(made, "non-model decoder time")
    assert f"Quadratic-SS {x2(quadratic['non_model_vs_baseline'])}×" in non_model.measured
    assert non_model.verdict == one_verdict(["agrees" if r["non_model_vs_baseline"] > 1 else "disagrees"
                                             for r in (packed, quadratic)]) == "mixed"
    totals = finding(made, "total stays below")
    assert totals.verdict == one_verdict(["agrees" if packed["total_norm"] < 1 else "disagrees",
                                          "agrees" if quadratic["total_norm"] > 1 else "disagrees"]) == "mixed"
    cost = finding(made, "cost model")
    for r in m["cost_model_by_path"]:
        assert f"{r['path']}: tau {x2(r['tau_ms'])} ms, delta {r['delta_ms']:.3f} ms/row " \
               f"(tau/delta {r['tau_over_delta']:.0f} rows)" in cost.measured
    assert cost.verdict == ("agrees" if all(abs(r["relative_error"]) <= 0.05 for r in m["cost_model_by_path"])
                            else "no") == "agrees"
    paths = finding(made, "over Linear-SS on each execution path")
    pairs = [r for r in m["ratios"] if r["comparison"] != "compiled / eager"]
    assert len(pairs) == 4 and all(f"{r['path']} {r['slice']} {ratio(r, 'throughput_ratio')}" in paths.measured
                                   for r in pairs)
    assert f"ar {x2(table['ar (compiled)']['total_norm'])}" in paths.measured
    assert finding(made, "token-identical").verdict == "agrees"


def test_14_negative_controls():
    result = committed("14_timing_decomposition")
    as_paper = copy.deepcopy(result)
    for r in as_paper["metrics"]["decomposition"]:
        if r["method"] == "quadratic B=8":
            r["non_model_vs_baseline"], r["total_norm"] = 2.8, 1.08
    made = make("14_timing_decomposition", as_paper)
    assert finding(made, "non-model decoder time").verdict == "agrees"
    assert finding(made, "total stays below").verdict == "agrees"
    costly = copy.deepcopy(result)
    for r in costly["metrics"]["decomposition"]:
        if r["method"] == "packed B=32":
            r["model_norm"] = 0.99
    assert finding(make("14_timing_decomposition", costly), "cuts model execution time").verdict == "disagrees"
    off = copy.deepcopy(result)
    off["metrics"]["cost_model_by_path"][1]["relative_error"] = 0.2
    assert finding(make("14_timing_decomposition", off), "cost model").verdict == "mixed"


def test_14_reduced_result_builds():
    """``compiled=False``: the eager path only, no intervals, no cost fit."""
    result = copy.deepcopy(committed("14_timing_decomposition"))
    m = result["metrics"]
    m["decomposition"] = [r for r in m["decomposition"] if not r["method"].endswith("(compiled)")]
    m["per_slice"] = [r for r in m["per_slice"] if not r["method"].endswith("(compiled)")]
    m["ratios"] = [dict(r, throughput_ratio_low=None, throughput_ratio_high=None)
                   for r in m["ratios"] if r["path"] == "eager"]
    m["cost_model_by_path"] = [dict(r, tau_ms=None, delta_ms=None, tau_over_delta=None,
                                    predicted_throughput_ratio=None, relative_error=None)
                               for r in m["cost_model_by_path"] if r["path"] == "eager"]
    made = make("14_timing_decomposition", result)
    assert finding(made, "cost model").verdict == "not resolved"
    paths = finding(made, "over Linear-SS on each execution path")
    assert "compiled" not in paths.measured and "n/a" in paths.measured


# ----- repetition beside acceptance (11-13) -------------------------------------------------------

@pytest.mark.parametrize("notebook, shown, hidden", [
    ("11_packed_ss_greedy", ["packed B=32", "linear B=32"], ["quadratic B=8"]),
    ("12_packed_ss_sampling", ["packed B=32", "linear B=32"], ["quadratic B=8"]),
    ("13_block_size_probe", ["linear B=16", "packed B=8", "quadratic B=4"], ["linear B=4"])])
def test_repetition_row_reads_the_report(notebook, shown, hidden, repetition_report):
    """No row from a result without a report; with one, the output share
    against the real text's and the main schedules' fresh / repeated tokens per iteration
    (13: the schedules at their best block size), never AR's."""
    result = copy.deepcopy(committed(notebook))
    result["metrics"].pop("repetition_report", None)                 # the committed results may carry one
    assert not [x for x in make(notebook, result).findings if "earned on" in x.claim]
    result["metrics"]["repetition_report"] = repetition_report(["ar", *shown, *hidden])
    row = finding(make(notebook, result), "earned on")
    assert row.verdict == "measured"
    assert "outputs vs real text: code 50% vs 5%, stdlib 50% vs 5%" in row.measured
    for method in shown:
        assert f"{method} 2.00 / 6.00 (20 / 60)" in row.measured
    assert not [m for m in [*hidden, "ar"] if f" {m} " in row.measured]
    # negative control: a schedule that accepts only on loops has no fresh tokens per iteration
    for r in result["metrics"]["repetition_report"]:
        r["fresh_tokens_per_iteration"], r["fresh_iterations"] = (None, 0) if r["method"] != "ar" else (None, None)
    assert f"{shown[0]} n/a / 6.00 (0 / 60)" in finding(make(notebook, result), "earned on").measured

