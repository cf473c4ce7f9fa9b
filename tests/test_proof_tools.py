"""The simulation and statistics helpers behind notebooks 01-03 (spec_lib.sim,
spec_lib.dominance, spec_lib.exactness, spec_lib.costmodel)."""

from __future__ import annotations

from collections import Counter

import warnings

import numpy as np
import pandas as pd
import pytest

from spec_lib.studies import costmodel, dominance, exactness, sim
from spec_lib import decode
from spec_lib.toy import MarkovLM, ScriptedDrafterLM


@pytest.mark.parametrize("name", list(sim.GENERATORS))
def test_generators_satisfy_assumption_and_simulator_matches_decoder(name):
    rng = np.random.default_rng(0)
    width, length = 4, 30
    thresholds = sim.GENERATORS[name](12, length + width + 3, width, rng)
    assert (thresholds <= np.arange(thresholds.shape[1])).all()                # c*_k <= k
    traj = sim.simulate(thresholds, width, length)
    for i in range(12):
        model = ScriptedDrafterLM(rng.integers(0, 7, length + width + 2), 8, 2, thresholds=thresholds[i])
        for schedule in ("packed", "linear"):
            res = decode(model, [1, 1], schedule=schedule, width=width, max_new_tokens=length)
            expected = np.minimum(getattr(traj, schedule)[i, 1: len(res.accepted) + 1], length)
            assert np.array_equal(np.cumsum(res.accepted), expected), (name, i, schedule)


def test_dominance_report_counts_nothing_under_the_assumption():
    rng = np.random.default_rng(1)
    report = sim.dominance_report(sim.thresholds_iid(500, 60, 5, rng), 5, 50)
    assert report["theorem_violations"] == report["nfe_violations"] == 0
    assert report["lemma_b1_violations"] == report["lemma_b2_violations"] == 0
    assert (report["nfe_ratio"] <= 1).all() and report["margin"].min() >= 0


def test_counterexample_search_finds_a_violating_table():
    found = sim.smallest_counterexample(max_length=8, max_width=4, budget=2 ** 15)
    assert found is not None and found["nfe_packed"] > found["nfe_linear"]
    assert found["violates_assumption"] and (np.diff(found["fresh"]) < 0).any()
    # Replaying the table through the real decoder reproduces the two NFE counts.
    size = found["table"].shape[0]
    model = ScriptedDrafterLM(np.arange(1, size) % 5 + 1, 8, 1, table=found["table"])
    for schedule, key in (("packed", "nfe_packed"), ("linear", "nfe_linear")):
        res = decode(model, [0], schedule=schedule, width=found["width"], max_new_tokens=found["length"])
        assert res.nfe == found[key]


def test_nfe_to_reach():
    assert dominance.nfe_to_reach([1, 3, 2], 2, 6).tolist() == [2, 4, 4, 4, 6, 6]
    assert dominance.nfe_to_reach([2, 1], 1, 3).tolist() == [1, 1, 2]


def test_stopped_law_and_goodness_of_fit():
    toy = MarkovLM(3, seed=2, eos_token_id=2, draft_noise=0.3)
    law = exactness.stopped_law(toy, [0], 4, temperature=0.7)
    assert abs(sum(law.values()) - 1) < 1e-12
    assert all(seq[-1] == 2 or len(seq) == 4 for seq in law)
    rng = np.random.default_rng(0)
    keys = list(law)
    draws = rng.choice(len(keys), size=20_000, p=np.array(list(law.values())))
    good = exactness.goodness_of_fit(Counter(keys[i] for i in draws), law)
    assert good["chi2_p"] > 1e-3 and good["tv"] < good["tv_noise_99"] * 1.5
    wrong = {k: v for k, v in exactness.stopped_law(toy, [1], 4, 0.7).items()}    # another prompt's law
    bad = exactness.goodness_of_fit(Counter(keys[i] for i in draws), wrong)
    assert bad["chi2_p"] < 1e-6


def test_one_step_report():
    p = np.array([0.5, 0.3, 0.2, 0.0])
    q = np.array([0.0, 0.1, 0.2, 0.7])
    report = exactness.one_step_report(p, q, 4000, seed=0)
    assert report["closed_form_error"] < 1e-12 and report["mass_outside_support"] == 0
    assert report["chi2_p"] > 1e-4 and report["no_residual_error"] > 0.1


def test_cost_model_helpers():
    rows = np.repeat([1, 8, 32, 64], 5)
    timings = pd.DataFrame({"rows": rows, "seconds": 0.004 + 0.0001 * rows})
    fit = costmodel.fit_cost(timings)
    assert fit["tau"] == pytest.approx(0.004) and fit["delta"] == pytest.approx(0.0001)
    with pytest.raises(ValueError, match=r"two distinct row counts.*\[8\]"):     # one point has no slope
        costmodel.fit_cost(pd.DataFrame({"rows": [8, 8, 8], "seconds": [0.01, 0.011, 0.012]}))
    with warnings.catch_warnings():                                             # two points: a line, no interval
        warnings.simplefilter("error")
        two = costmodel.fit_cost(timings[timings["rows"].isin([1, 64])])
    assert two["delta"] == pytest.approx(0.0001) and np.isnan(two["delta_ci"][0])
    a100 = costmodel.paper_a100_tau_delta()
    assert a100["tau"] == pytest.approx(0.0244) and a100["tau_over_delta"] == pytest.approx(195.9, abs=0.1)
    assert costmodel.throughput_ratio(0.0, 2.0, 32) == pytest.approx(1.0)       # delta-bound: 2x rows per NFE
    assert costmodel.throughput_ratio(1e9, 1.1, 32) == pytest.approx(1.1)       # overhead-bound
    # Sec. 4.1's calibration inverts the time-per-NFE ratio: x = B (2 - r) / (r - 1)
    x = costmodel.tau_over_delta_from_time_ratio(1.1, 32)
    assert x == pytest.approx(288.0)
    assert (x + 64) / (x + 32) == pytest.approx(1.1)                           # round trip
    for bad in (1.0, 0.9, 2.0):
        with pytest.raises(ValueError, match="time_per_nfe_ratio"):
            costmodel.tau_over_delta_from_time_ratio(bad, 32)
    calibrations = costmodel.paper_calibrations().set_index("calibration")
    sec41 = calibrations.loc["Sec. 4.1 decoder time per NFE"]
    assert 280 < sec41["tau_over_delta_low"] < 290 and 320 < sec41["tau_over_delta_high"] < 330
    # the consistency check: tokens/NFE gain / time-per-NFE ratio is the throughput gain
    assert sec41["predicted_ratio_low"] == pytest.approx(1.134 / 1.101)
    assert sec41["predicted_ratio_high"] == pytest.approx(1.203 / 1.089)
    assert calibrations.loc["App. F.2 model time (LoRA)", "tau_over_delta_low"] == pytest.approx(195.9, abs=0.1)
    costs = costmodel.iteration_costs(1.0, 0.1, [3]).set_index("schedule")
    assert costs.loc["linear", "layout"] == pytest.approx(2 + 0.8)
    assert costs.loc["quadratic", "layout"] == pytest.approx(1 + 2.0)
