"""The DEdit notebooks' findings (30-35): numbers read from the committed cpu results, verdicts that
follow the numbers (negative controls on edited copies), and reduced results (smoke-sized, null
intervals) that still report."""

from __future__ import annotations

import copy

import pytest

from spec_lib.notebook import findings, findings_dedit

NOTEBOOKS = sorted(findings_dedit.FINDINGS)


def _result(notebook: str) -> dict:
    return copy.deepcopy(findings.read_result(notebook, "cpu"))


def _report(notebook: str, result: dict) -> findings.Report:
    return findings.report(findings_dedit.FINDINGS, notebook, result)


def _finding(made: findings.Report, words: str) -> findings.Finding:
    matches = [x for x in made.findings if words in x.claim]
    assert len(matches) == 1, [x.claim for x in made.findings]
    return matches[0]


def _check_text(made: findings.Report) -> None:
    assert made.headline.endswith(".") and "\n" not in made.headline and "|" not in made.headline
    assert 2 <= len(made.findings) <= 8                      # 8: with the repetition and by-pass rows
    for x in made.findings:
        assert x.verdict in findings.VERDICTS
        assert "nan" not in (x.measured + " " + made.headline).lower().replace(",", " ").replace(";", " ").split()


def _null_intervals(value):
    """``value`` with every interval bound (``*_low``, ``*_high``, ``ci_*``) set to null, as a run too
    small to bootstrap leaves them."""
    if isinstance(value, dict):
        return {k: None if k.endswith(("_low", "_high")) or k.startswith("ci_") else _null_intervals(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_null_intervals(v) for v in value]
    return value


def _macro(rows: list[dict], method: str, temperature: float = 0.0) -> dict:
    return next(r for r in rows if r["method"] == method and r["slice"] == "macro" and r["temperature"] == temperature)


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_every_report_is_well_formed(notebook):
    _check_text(_report(notebook, _result(notebook)))


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_null_intervals_do_not_break_a_report(notebook):
    made = _report(notebook, _null_intervals(_result(notebook)))
    _check_text(made)


def test_dedit_training():
    result = _result("30_dedit_training")
    s = {r["variant"]: r for r in result["metrics"]["summary"]}
    rates = result["metrics"]["proposal_mix_rates"]
    made = _report("30_dedit_training", result)
    for value in (s["dedit"]["final_p1_accuracy"], s["dflash"]["final_p1_accuracy"], s["dedit"]["final_p2_accuracy"],
                  s["dedit_no_mix"]["final_p2_accuracy"]):
        assert f"{value:.3f}" in made.headline
    assert f"{rates[0]['gt_selection']:.2f} (step {rates[0]['step']})" in _finding(made, "Table 6").measured
    minutes = sum(r["train_seconds"] for r in s.values()) / 60
    assert f"{minutes:.1f} min for {len(s)} training phases" in _finding(made, "Training cost").measured
    assert [x.verdict for x in made.findings] == ["agrees", "agrees", "agrees", "agrees", "measured"]

    # negative controls: a P1 far below DFlash's; a no-mix editor that edits better; GT selection that falls
    s["dedit"]["final_p1_accuracy"] = s["dflash"]["final_p1_accuracy"] - 0.05
    s["dedit_no_mix"]["final_p2_accuracy"] = s["dedit_no_mix"]["final_p1_accuracy"] + 0.2
    rates[-1]["gt_selection"], rates[-1]["overwrite"] = rates[0]["gt_selection"] / 2, rates[0]["overwrite"] * 2
    edited = _report("30_dedit_training", result)
    assert _finding(edited, "on par").verdict == "disagrees"
    assert _finding(edited, "revise its own proposal").verdict == "mixed"
    assert _finding(edited, "Table 6").verdict == "disagrees"

    # a smoke-sized history: one evaluation step
    result["metrics"]["proposal_mix_rates"] = rates[:1]
    assert _finding(_report("30_dedit_training", result), "Table 6").verdict == "not resolved"


def test_dedit_decoding():
    result = _result("31_dedit_decoding")
    main, ex = result["metrics"]["main"], result["metrics"]["exactness"]
    made = _report("31_dedit_decoding", result)
    dflash, dedit, wide = (_macro(main, name) for name in ("dflash P1", "dedit P3", "dedit W=32 P3"))
    assert f"dedit P3 {dedit['tau']:.2f} against dflash P1 {dflash['tau']:.2f}" in made.headline
    assert f"{ex['identical']} of {ex['responses']}" in made.headline
    assert f"{dflash['speedup']:.2f}×" in made.headline
    code = next(r for r in main if r["method"] == "dedit W=32 P3" and r["slice"] == "code" and r["temperature"] == 0)
    speed = _finding(made, "faster than AR")
    assert f"code {code['speedup']:.2f}× [{code['speedup_low']:.2f}, {code['speedup_high']:.2f}]" in speed.measured
    assert speed.verdict == "disagrees"                               # below AR on code and math, unresolved on stdlib
    higher = all(_macro(main, name)["tau"] > dflash["tau"] for name in ("dedit P3", "dedit W=32 P3"))
    assert _finding(made, "higher greedy tau").verdict == ("agrees" if higher else "disagrees")
    assert _finding(made, "Verification").verdict == "agrees"

    # negative controls
    dedit["tau"] = wide["tau"] = dflash["tau"] - 0.1
    for r in main:
        if r["method"] == "dedit W=32 P3" and r["temperature"] == 0 and r["slice"] != "macro":
            r["speedup_low"], r["speedup_high"] = 1.1, 1.5
    ex["ok"] = False
    result["checks"]["early_exit_outputs_identical"] = False
    edited = _report("31_dedit_decoding", result)
    assert _finding(edited, "higher greedy tau").verdict == "disagrees"
    assert _finding(edited, "faster than AR").verdict == "agrees"
    assert _finding(edited, "Verification").verdict == "disagrees"
    assert _finding(edited, "Future Work").verdict == "disagrees"

    # greedy only: no stochastic finding
    result["metrics"]["main"] = [r for r in main if r["temperature"] == 0]
    assert not [x for x in _report("31_dedit_decoding", result).findings if "T = 1" in x.claim]


def test_dedit_analysis():
    result = _result("32_dedit_analysis")
    m = result["metrics"]
    tau = {(r["drafter"], r["pass"]): r for r in m["tau_by_pass"] if r["slice"] == "macro"}
    made = _report("32_dedit_analysis", result)
    assert "DEdit " + " / ".join(f"{tau['dedit', p]['tau']:.2f}" for p in (1, 2, 3, 4)) in made.headline
    math_p2 = next(r for r in m["visibility"] if r["slice"] == "math" and r["pass"] == "P2")
    visibility = _finding(made, "Hiding future")
    assert f"math +{math_p2['delta']:.2f}" in visibility.measured
    assert visibility.verdict == "agrees"                             # the copy slice: +0.00 at P2
    p3_gain = tau["dedit_w32", 3]["tau"] / tau["dedit", 3]["tau"] - 1
    assert f"DEdit P3 +{100 * p3_gain:.1f}%" in _finding(made, "Wider windows").measured
    assert _finding(made, "Editing raises").verdict == "agrees"
    assert _finding(made, "beyond the one supervised").verdict == "mixed"   # W = 24 loses 0.007 at P3
    assert _finding(made, "harmful edits").verdict == "agrees"

    # negative controls
    for r in m["visibility"]:
        r["delta"] = -abs(r["delta"]) - 0.01
    tau["dedit_w24", 3]["tau"] = tau["dedit_w24", 2]["tau"] + 0.05
    effects = {r["drafter"]: r for r in m["edit_effects"]}
    effects["dedit"]["shortens"], effects["dedit"]["mean_gain"] = 0.5, -1.0
    edited = _report("32_dedit_analysis", result)
    assert _finding(edited, "Hiding future").verdict == "disagrees"
    assert _finding(edited, "beyond the one supervised").verdict == "agrees"
    assert _finding(edited, "harmful edits").verdict == "disagrees"
    tau["dedit_w32", 3]["tau"] = tau["dedit", 3]["tau"]              # no gain from the wider window at P3
    assert _finding(_report("32_dedit_analysis", result), "Wider windows").verdict == "disagrees"

    # a smoke-sized run: one window expansion per drafter, at another width
    m["tau_by_pass"] = [{**r, "drafter": r["drafter"].replace("_w32", "_w12"), "W": {16: 8, 32: 12}[r["W"]]}
                        for r in m["tau_by_pass"] if r["drafter"] != "dedit_w24"]
    reduced = _report("32_dedit_analysis", result)
    _check_text(reduced)
    assert "W = 8 to 12" in _finding(reduced, "Wider windows").measured


def test_dedit_baselines():
    result = _result("33_dedit_baselines")
    m = result["metrics"]
    made = _report("33_dedit_baselines", result)
    domino, dspark, dedit = (_macro(m["main"], name) for name in ("domino", "dspark", "dedit W=32 P3"))
    assert f"domino {domino['tau']:.2f}, dspark {dspark['tau']:.2f}" in made.headline
    assert made.headline.index(f"domino {domino['tau']:.2f}") < made.headline.index(f"dedit W=32 P3 {dedit['tau']:.2f}")
    assert f"dspark is fastest at {dspark['speedup']:.2f}×" in made.headline
    wide = _macro(m["main"], "domino W=32")
    width = _finding(made, "wider window gains little")
    assert f"({100 * (wide['tau'] / domino['tau'] - 1):+.1f}%)" in width.measured
    assert width.verdict == "agrees"                                 # DFlash and Domino both within 1%
    assert _finding(made, "highest macro tau").verdict == "disagrees"
    assert _finding(made, "highest macro speedup").verdict == "disagrees"
    cut = next(r for r in m["dspark_cut"] if r["method"].startswith("dspark (") and r["slice"] == "code")
    dspark_cut = _finding(made, "confidence-selected prefix")
    assert f"code {100 * cut['cut_share']:.0f}%, {cut['verified_per_round']:.1f}" in dspark_cut.measured

    # negative controls: DEdit above every baseline; Domino's wide window gains nothing
    for t in (0.0, 1.0):
        _macro(m["main"], "dedit W=32 P3", t)["tau"] = 20.0
    dedit["speedup"] = 3.0
    for r in m["tau_by_width"]:
        if r["method"] == "domino W=32" and r["slice"] == "macro":
            r["tau"] = domino["tau"]
    edited = _report("33_dedit_baselines", result)
    assert _finding(edited, "highest macro tau").verdict == "agrees"
    assert _finding(edited, "highest macro speedup").verdict == "agrees"
    assert _finding(edited, "wider window gains little").verdict == "agrees"


def test_dedit_future_context():
    result = _result("34_dedit_future_context")
    m = result["metrics"]
    made = _report("34_dedit_future_context", result)
    slopes = {(r["against"], r["slice"]): r for r in m["slopes"] if r["editor"] == "dedit"}
    corrector, domino = slopes["corrector", "all"], slopes["domino", "all"]
    assert (f"+{corrector['slope']:.2f} [{corrector['slope_low']:.2f}, {corrector['slope_high']:.2f}]"
            in made.headline)
    assert f"{domino['mean_advantage']:.2f}" in made.headline
    assert f"losses {100 * domino['losses']:.1f}%" in _finding(made, "real draft").measured
    copy_slope = slopes["corrector", "copy"]
    assert f"copy +{copy_slope['slope']:.2f}" in _finding(made, "copy-heavy").measured
    assert [x.verdict for x in made.findings] == ["agrees", "disagrees", "mixed", "not resolved"]

    # negative controls: the like-for-like slope turns negative; copy's slope stands clear of the others
    corrector["slope"], corrector["slope_low"], corrector["slope_high"] = -0.3, -0.4, -0.2
    copy_slope["slope_low"] = max(r["slope_high"] for (a, s), r in slopes.items() if a == "corrector") + 0.1
    for r in m["by_future"]:
        if r["editor"] == "dedit" and r["future_correct"] >= 2:
            r["ci_low"], r["ci_high"] = 0.1, 0.5
    edited = _report("34_dedit_future_context", result)
    assert _finding(edited, "run once").verdict == "disagrees"
    assert _finding(edited, "copy-heavy").verdict == "agrees"
    assert _finding(edited, "negligible at zero").verdict == "agrees"

    # a slice without a slope (too few rounds to fit one), as a small run can leave
    for r in m["slopes"]:
        if r["slice"] == "code":
            r["slope"] = r["slope_low"] = r["slope_high"] = None
    reduced = _report("34_dedit_future_context", result)
    _check_text(reduced)
    assert "code n/a [n/a, n/a]" in _finding(reduced, "copy-heavy").measured


def test_dedit_frozen_editors():
    result = _result("35_dedit_frozen_editors")
    m = result["metrics"]
    made = _report("35_dedit_frozen_editors", result)
    macro = {r["editor"]: r for r in m["ablation"] if r["slice"] == "macro"}
    assert f"macro tau {macro['full']['tau_p1']:.2f}" in made.headline
    for editor in ("full", "no_joint", "no_mix", "no_both"):
        assert f"{editor} {macro[editor]['tau_p2']:.2f}" in made.headline
    joint = _finding(made, "Removing joint training")
    assert f"({macro['no_joint']['tau_p2'] - macro['full']['tau_p2']:+.2f} against full)" in joint.measured
    assert joint.verdict == "disagrees"
    assert _finding(made, "Removing ProposalMix").verdict == "agrees"
    assert _finding(made, "improves on the frozen proposal").verdict == "disagrees"
    assert _finding(made, "harmful edits").verdict == "agrees"
    accuracy = next(r["final_p2_accuracy"] for r in m["training"] if r["variant"] == "select_low")
    assert f"select_low {accuracy:.3f}" in _finding(made, "selected by first-pass confidence").measured

    # negative controls: joint training helps, the Full editor gains over P1, ProposalMix hurts
    macro["full"]["tau_p2"] = macro["full"]["tau_p1"] + 0.3
    macro["no_both"]["tau_p2"] = macro["no_mix"]["tau_p2"] - 0.1
    macro["no_joint"]["tau_p2"] = macro["no_both"]["tau_p2"] + 0.05
    macro["no_mix"]["tau_p2"] = macro["full"]["tau_p2"] + 0.1
    edited = _report("35_dedit_frozen_editors", result)
    assert _finding(edited, "Removing joint training").verdict == "agrees"
    assert _finding(edited, "improves on the frozen proposal").verdict == "agrees"
    assert _finding(edited, "Removing ProposalMix").verdict == "mixed"

    # without the selection ablations (an editor set of Table 2(b) alone)
    m["ablation"] = [r for r in m["ablation"] if r["editor"] in ("full", "no_joint", "no_mix", "no_both")]
    _check_text(_report("35_dedit_frozen_editors", result))


@pytest.mark.parametrize("notebook, shown, hidden", [
    ("31_dedit_decoding", ["dflash P1", "dedit P3", "dedit W=32 P3"], ["dedit w/o ProposalMix P3"]),
    ("33_dedit_baselines", ["dedit W=32 P3", "domino", "dspark", "dflash P1"], ["domino W=32", "dspark (cut < 0.5)"])])
def test_tau_is_read_beside_the_repetition_report(notebook, shown, hidden, repetition_report):
    """No row from a result without a report; with one, per temperature the
    output share against the real text's and the main drafters' fresh / repeated tokens per round."""
    result = _result(notebook)
    result["metrics"].pop("repetition_report", None)                 # the committed results may carry one
    assert not [x for x in _report(notebook, result).findings if "earned on" in x.claim]
    result["metrics"]["repetition_report"] = repetition_report(["ar", *shown, *hidden], ("code", "stdlib", "math"),
                                                               (0.0, 1.0))
    made = _report(notebook, result)
    _check_text(made)
    row = _finding(made, "earned on")
    assert row.verdict == "measured" and row.measured.startswith("T = 0: ") and "; T = 1: " in row.measured
    assert row.measured.count("code 50% vs 5%, stdlib 50% vs 5%, math 50% vs 5%") == 2
    for method in shown:
        assert row.measured.count(f"{method} 2.00 / 6.00 (30 / 90)") == 2
    for method in hidden:
        assert f"{method} 2.00" not in row.measured

