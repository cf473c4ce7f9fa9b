"""The findings of the DEER notebooks (20-22) report the committed cpu results' numbers, their
verdicts follow the numbers (negative controls: an edited result turns a verdict), and a reduced
result (smoke-sized, intervals missing) still makes a report."""

from __future__ import annotations

import copy

import pytest

from spec_lib.notebook import findings, findings_deer


def _result(notebook: str) -> dict:
    return findings.read_result(notebook, "cpu")


def _report(notebook: str, result: dict) -> findings.Report:
    made = findings.report(findings_deer.FINDINGS, notebook, result)
    assert made.headline and "\n" not in made.headline and "|" not in made.headline
    assert 2 <= len(made.findings) <= 8                      # 8: with the repetition and by-pass rows
    for finding in made.findings:
        assert finding.claim and finding.measured and "\n" not in finding.claim + finding.measured
        assert "nan" not in finding.measured.lower().split(), finding.measured
    return made


def _row(made: findings.Report, words: str) -> findings.Finding:
    rows = [x for x in made.findings if words in x.claim]
    assert len(rows) == 1, (words, [x.claim for x in made.findings])
    return rows[0]


def _text(made: findings.Report) -> str:
    return made.headline + " " + " ".join(x.measured for x in made.findings)


# ----- 20: alignment ------------------------------------------------------------------------------

def test_alignment_reports_the_committed_numbers():
    result = _result("20_deer_alignment")
    made = _report("20_deer_alignment", result)
    ablation = {r["slice"]: r for r in result["metrics"]["stage2_ablation"]}
    code = ablation["code"]
    assert f"τ = {code['cpu-scale Stage I + II']:.2f}" in made.headline
    assert f"{code['pre-trained dLLM']:.2f} before alignment" in made.headline
    ratios = [r["faithful Stage I + II"] / r["cpu-scale Stage I + II"] for r in ablation.values()]
    assert f"{min(ratios):.2f}-{max(ratios):.2f}×" in made.headline
    stage2 = _row(made, "cpu-scale objectives")
    for s, r in ablation.items():
        assert f"{s} {r['cpu-scale Stage I']:.2f} → {r['cpu-scale Stage I + II']:.2f}" in stage2.measured
    gains = [r["cpu-scale Stage I + II"] > r["cpu-scale Stage I"] for r in ablation.values()]
    assert stage2.verdict == ("agrees" if all(gains) else "disagrees" if not any(gains) else "mixed")
    high = [r for r in result["metrics"]["alpha_sensitivity"] if r["alpha"] == 1.05]
    for r in high:
        assert f"{r['weight_ratio_first_last']:.2f}" in _row(made, "noisier").measured
        assert f"{r['first_heldout_loss']:.2f} → {r['last_heldout_loss']:.2f}" in _row(made, "diverges").measured
    rising = [r["last_heldout_loss"] > r["first_heldout_loss"] for r in high]
    assert _row(made, "diverges").verdict == ("agrees" if all(rising) else "disagrees" if not any(rising) else "mixed")
    assert _row(made, "Project question").verdict == "measured"


def test_alignment_verdicts_follow_the_numbers():
    result = _result("20_deer_alignment")
    before = _report("20_deer_alignment", result)
    edited = copy.deepcopy(result)
    for r in edited["metrics"]["stage2_ablation"]:                    # Stage II now loses everywhere
        r["cpu-scale Stage I + II"] = r["cpu-scale Stage I"] - 0.1
        r["pre-trained dLLM"] = 5.0                                  # and the unaligned drafter wins
    for r in edited["metrics"]["alpha_sensitivity"]:                  # every Stage II loss rises
        r["last_heldout_loss"] = r["first_heldout_loss"] + 1
    after = _report("20_deer_alignment", edited)
    assert _row(before, "cpu-scale objectives").verdict == "agrees"
    assert _row(after, "cpu-scale objectives").verdict == "disagrees"
    assert _row(before, "D2A alignment").verdict == "agrees" and _row(after, "D2A alignment").verdict == "disagrees"
    assert _row(before, "diverges").verdict == "disagrees" and _row(after, "diverges").verdict == "agrees"


def test_alignment_with_missing_values():
    """A smoke-sized result: a slice without complete cycles (tau null), a spread that could not be computed."""
    result = copy.deepcopy(_result("20_deer_alignment"))
    for r in result["metrics"]["stage2_ablation"][:1]:
        for key in ("faithful Stage I + II", "stage2_gain faithful", "cpu-scale Stage I + II", "stage2_gain cpu-scale"):
            r[key] = None
    for r in result["metrics"]["alpha_sensitivity"]:
        r["late_train_loss_std"] = None
    made = _report("20_deer_alignment", result)
    assert "n/a" in _text(made)
    assert _row(made, "noisier").verdict == "not resolved"


# ----- 21: decoding -------------------------------------------------------------------------------

def _main(result: dict, temperature: float, slice_: str, kind: str) -> dict:
    return next(r for r in result["metrics"]["main"] if r["temperature"] == temperature and r["slice"] == slice_
                and r["method"].split()[0] == kind)


def test_decoding_reports_the_committed_numbers():
    result = _result("21_deer_decoding")
    made = _report("21_deer_decoding", result)
    m = result["metrics"]
    ex = m["exactness"]
    assert f"{ex['identical']} of {ex['responses']}" in made.headline
    deer, ar_draft = _main(result, 0.0, "code", "deer"), _main(result, 0.0, "code", "ar_draft")
    assert f"{deer['speedup']:.2f}× [{deer['speedup_low']:.2f}, {deer['speedup_high']:.2f}]" in made.headline
    low, high = ar_draft["speedup_low"], ar_draft["speedup_high"]
    assert f"{ar_draft['speedup']:.2f}× [{low:.2f}, {high:.2f}]" in made.headline
    assert ("is not faster" in made.headline) == (deer["speedup_low"] <= 1)
    speed = _row(made, "faster than AR decoding")
    rows = [r for r in m["main"] if r["method"].startswith("deer")]
    for r in rows:
        assert f"{r['speedup']:.2f}× [{r['speedup_low']:.2f}, {r['speedup_high']:.2f}]" in speed.measured
    sides = {"agrees" if r["speedup_low"] > 1 else "disagrees" if r["speedup_high"] < 1 else "not resolved"
             for r in rows}
    assert speed.verdict == (sides.pop() if len(sides) == 1 else "mixed" if "agrees" in sides else "disagrees" if "disagrees" in sides else "not resolved")
    tau = _row(made, "more drafts per cycle")
    assert f"code {deer['tau']:.2f} / {ar_draft['tau']:.2f}" in tau.measured
    above = [_main(result, 0.0, s, "deer")["tau"] > _main(result, 0.0, s, "ar_draft")["tau"] for s in m["prompts"]]
    above += list(m["deer_tau_above_ar_drafter_k_ge_8"].values())
    assert tau.verdict == ("agrees" if all(above) else "disagrees" if not any(above) else "mixed")
    res = next(r for r in m["resurgence"] if r["method"].startswith("deer"))
    assert f"{res['cycles_top']} vs {res['cycles_below']}" in _row(made, "resurgence").measured
    assert _row(made, "resurgence").verdict == ("agrees" if res["resurgence"] else "not resolved"
                                                if res["cycles_top"] >= res["cycles_below"] else "disagrees")
    batch = _row(made, "batched throughput")
    for r in m["batch_throughput"]:
        assert f"batch {r['batch']} {r['deer'] / r['ar']:.2f}×" in batch.measured
    peer = m["peer"]
    assert f"{peer['ar_draft_over_assisted']:.2f}× [{peer['ci'][0]:.2f}, {peer['ci'][1]:.2f}]" in _row(
        made, "lossless").measured
    compiled = [r for r in m["path_ratios"] if r["path"] == "compiled" and r["comparison"] != "compiled / eager"]
    for r in compiled:
        assert (f"compiled {r['slice']} {r['throughput_ratio']:.2f}× [{r['throughput_ratio_low']:.2f}, "
                f"{r['throughput_ratio_high']:.2f}]") in _row(made, "execution path").measured


def test_decoding_verdicts_follow_the_numbers():
    result = _result("21_deer_decoding")
    before = _report("21_deer_decoding", result)
    edited = copy.deepcopy(result)
    m = edited["metrics"]
    for r in m["main"]:
        if r["method"].startswith("deer"):                           # DEER now clearly faster, accepting more
            r["speedup"], r["speedup_low"], r["speedup_high"] = 3.0, 2.5, 3.5
            r["tau"] = 20.0
    m["deer_tau_above_ar_drafter_k_ge_8"] = {k: True for k in m["deer_tau_above_ar_drafter_k_ge_8"]}
    m["exactness"]["identical"] -= 1
    m["exactness"]["ok"] = False
    for r in m["resurgence"]:
        r["cycles_top"], r["cycles_below"], r["resurgence"] = 9, 1, True
    for r in m["batch_throughput"]:
        r["deer"] = 2 * r["ar"]
    after = _report("21_deer_decoding", edited)
    for words, old, new in [("faster than AR decoding", "disagrees", "agrees"),       # slower on every slice
                            ("more drafts per cycle", "disagrees", "agrees"),
                            ("lossless", "agrees", "disagrees"), ("resurgence", "not resolved", "agrees"),
                            ("batched throughput", "disagrees", "agrees")]:
        assert (_row(before, words).verdict, _row(after, words).verdict) == (old, new), words
    assert "is faster than AR: 3.00× [2.50, 3.50]" in after.headline
    assert f"{m['exactness']['identical']} of {m['exactness']['responses']}" in after.headline


def test_decoding_on_a_reduced_result():
    """Smoke-like: eager path only, a shorter sweep, two batch sizes, intervals that could not be computed."""
    result = copy.deepcopy(_result("21_deer_decoding"))
    m = result["metrics"]
    for r in m["main"]:
        if r["speedup"] is not None:
            r["speedup_low"] = r["speedup_high"] = None
    m["path_ratios"] = [r for r in m["path_ratios"] if r["path"] == "eager"]
    m["path_acceptance"], m["drafter_compile_seconds"], m["compile_seconds"] = [], {}, {}
    m["block_sweep"] = [r for r in m["block_sweep"] if r["width"] <= 8]
    m["deer_tau_above_ar_drafter_k_ge_8"] = {"8": False}
    m["batch_throughput"] = m["batch_throughput"][:2]
    m["peer"]["ci"] = [None, None]
    m["resurgence"][0].update(cycles_top=0, cycles_below=0, p_value=None, resurgence=False)
    made = _report("21_deer_decoding", result)
    assert "[n/a, n/a]" in made.headline
    assert _row(made, "faster than AR decoding").verdict == "not resolved"
    assert _row(made, "resurgence").verdict == "not resolved"
    assert "compiled" not in _row(made, "execution path").measured
    assert "on the eager path:" in _row(made, "lossless").measured



def test_decoding_reads_tau_beside_the_repetition_report(repetition_report):
    """No row from a result without a report; with one, per temperature the output
    share against the real text's and DEER's and the AR drafter's fresh / repeated tokens per iteration."""
    result = copy.deepcopy(_result("21_deer_decoding"))
    result["metrics"].pop("repetition_report", None)                 # the committed result may carry one
    assert not [x for x in _report("21_deer_decoding", result).findings if "earned on" in x.claim]
    result["metrics"]["repetition_report"] = repetition_report(["ar", "deer k=8", "ar_draft k=8"],
                                                               temperatures=(0.0, 0.6))
    row = _row(_report("21_deer_decoding", result), "earned on")
    assert row.verdict == "measured" and row.measured.startswith("T = 0: ") and "; T = 0.6: " in row.measured
    assert row.measured.count("deer k=8 2.00 / 6.00 (20 / 60), ar_draft k=8 2.00 / 6.00 (20 / 60)") == 2
    assert row.measured.count("code 50% vs 5%") == 2

# ----- 22: exact sampling -------------------------------------------------------------------------

def test_exact_sampling_reports_the_committed_numbers():
    result = _result("22_deer_exact_sampling")
    made = _report("22_deer_exact_sampling", result)
    fits = result["metrics"]["fits"]
    deer = [r for r in fits if r["schedule"] == "deer" and r["role"] == "correct"]
    controls = [r for r in fits if r["role"] == "negative control"]
    assert f"On {fits[0]['n']:,} sampled" in made.headline
    p = [r["chi2_p"] for r in deer]
    assert f"chi-square p {min(p):.2g} to {max(p):.2g}" in made.headline
    alpha_pass, alpha_fail = result["parameters"]["alpha_pass"], result["parameters"]["alpha_fail"]
    caught = sum(r["chi2_p"] < alpha_fail and r["g_p"] < alpha_fail for r in controls)
    assert f"{caught} of {len(controls)} no-residual controls are rejected" in made.headline
    lossless = _row(made, "DEER's sampling is lossless")
    for r in deer:
        assert f"chi-square p {r['chi2_p']:.2g}, G p {r['g_p']:.2g}, TV {r['tv']:.3f}" in lossless.measured
    assert f"mean TV {result['metrics']['target_drafter_tv']:.2f}" in lossless.measured
    assert lossless.verdict == ("agrees" if all(min(r["chi2_p"], r["g_p"]) > alpha_pass for r in deer) else "disagrees")
    assert _row(made, "residual").verdict == ("agrees" if caught == len(controls) else "disagrees")


def test_exact_sampling_verdicts_follow_the_numbers():
    result = _result("22_deer_exact_sampling")
    before = _report("22_deer_exact_sampling", result)
    edited = copy.deepcopy(result)
    fits = edited["metrics"]["fits"]
    next(r for r in fits if r["label"] == "deer" and r["temperature"] == 1.0)["chi2_p"] = 1e-9
    next(r for r in fits if r["schedule"] == "ar_draft" and r["role"] == "correct")["g_p"] = 1e-7
    next(r for r in fits if r["role"] == "negative control")["g_p"] = 0.5
    after = _report("22_deer_exact_sampling", edited)
    for words in ("DEER's sampling is lossless", "AR-drafter baseline", "residual"):
        assert (_row(before, words).verdict, _row(after, words).verdict) == ("agrees", "disagrees"), words
    assert "does not fit" in after.headline and "3 of 4 no-residual controls" in after.headline


@pytest.mark.parametrize("missing", ["chi2_p", "g_p"])
def test_exact_sampling_on_a_reduced_result(missing):
    """Smoke-sized: 2,000 continuations, alpha_fail 1e-3, a test that returned no p-value."""
    result = copy.deepcopy(_result("22_deer_exact_sampling"))
    result["parameters"].update(n_samples=2000, alpha_fail=0.001)
    for r in result["metrics"]["fits"]:
        r["n"] = 2000
    result["metrics"]["fits"][0][missing] = None
    made = _report("22_deer_exact_sampling", result)
    assert "On 2,000 sampled" in made.headline and "n/a" in _text(made)
    assert _row(made, "DEER's sampling is lossless").verdict == "disagrees"    # a missing p is no pass
