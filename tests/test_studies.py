"""The study helpers whose numbers the README quotes: repetition statistics and the greedy
identity check (both must be able to say "no")."""

import numpy as np
import pandas as pd
import pytest

from spec_lib.studies import bench, repetition


def test_repetition_share_counts_tokens_that_close_a_repeated_ngram():
    assert repetition.repetition_share([]) == 0.0
    assert repetition.repetition_share(list(range(50))) == 0.0           # nothing repeats
    loop = [1, 2, 3, 4] * 5                                               # 20 tokens, period 4
    mask = repetition.repeated_mask(loop, n=4)
    # The first 4-gram closes at index 3; from index 7 on every token closes a seen 4-gram.
    assert not mask[:7].any() and mask[7:].all()
    assert repetition.repetition_share(loop, n=4) == pytest.approx(13 / 20)
    # n matters: with n = 2, "1 2" repeats at index 5 already.
    assert repetition.repeated_mask(loop, n=2)[5]


def test_acceptance_by_repetition_splits_iterations():
    output = [9, 8, 7, 6, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4]
    runs = pd.DataFrame({"slice": ["s"], "method": ["m"], "output": [output], "accepted": [[4, 4, 4, 4]]})
    table = repetition.acceptance_by_repetition(runs, n=4).iloc[0]
    # Iterations 1-2 are fresh (no 4-gram seen before), 3-4 contain repeated tokens.
    assert table["fresh_iterations"] == 2 and table["repeated_iterations"] == 2
    assert table["fresh_tokens_per_iteration"] == 4.0 and table["repeated_tokens_per_iteration"] == 4.0


def _identity(identical, responses):
    return pd.DataFrame({"slice": ["s"], "method": ["m"], "identical": [identical], "responses": [responses]})


def _diverged(gaps):
    return pd.DataFrame({"logit_gap_top1_top2": gaps})


def test_identity_check_fails_on_a_divergence_that_is_not_a_tie():
    assert bench.identity_check(_identity(10, 10), _diverged([]), tie_gap=1e-3)["ok"]
    tie = bench.identity_check(_identity(9, 10), _diverged([1e-5]), tie_gap=1e-3)
    assert tie["ok"] and tie["explained_by_ties"] == 1
    real = bench.identity_check(_identity(9, 10), _diverged([0.5]), tie_gap=1e-3)
    assert not real["ok"] and real["unexplained"] == 1 and real["max_gap"] == 0.5
    # Counts that do not add up (a divergence not reported) fail too.
    assert not bench.identity_check(_identity(8, 10), _diverged([1e-5]), tie_gap=1e-3)["ok"]
    assert np.isfinite(real["tie_gap"])


def test_branch_block_study_compares_the_same_positions():
    """On the exact chain both query shapes propose the exact marginals of the same positions:
    their hits agree everywhere, offset 1 (the next-token argmax) is always the greedy token,
    and later offsets are not (the marginal's argmax leaves the greedy path)."""
    from spec_lib.studies import recipe
    from spec_lib.toy import MarkovLM

    chain = MarkovLM(12, seed=1, concentration=0.3, draft_noise=0.3)
    hits = recipe.branch_block_hits(chain, [1, 2, 3], width=5)
    assert hits["linear"].shape == hits["quadratic_branch"].shape == (6, 5)
    assert (hits["linear"] == hits["quadratic_branch"]).all()
    assert hits["linear"][:, 0].all() and not hits["linear"].all()
    prompts = {"a": [[1, 2, 3], [4, 5]], "b": [[7]]}
    by_offset, summary = recipe.branch_block_accuracy(chain, prompts, 5, n_resamples=200, progress=False)
    assert len(by_offset) == 2 * 2 * 6 * 5 and set(by_offset["branch"]) == set(range(6))
    assert (summary["difference"] == 0).all() and (summary["difference_low"] <= summary["difference_high"]).all()


def test_tau_conventions_of_the_two_papers():
    """Seed 001's tau counts accepted drafts (0..k), seed 002's counts tokens per round (1..k+1);
    both are reported, lengths follow the convention, and the cut last cycle is left out."""
    from spec_lib.studies import acceptance

    # k = 4: cycles append a = h + 1 tokens; the final 2 of each response may be cut, so dropped
    runs = pd.DataFrame({"slice": ["s", "s"], "method": ["m", "m"], "width": [4, 4], "prompt": [0, 1],
                         "sample": [0, 0], "accepted": [[5, 5, 1, 2], [5, 3, 5, 9]]})
    deer = acceptance.tau_by(runs, convention="deer").iloc[0]
    dedit = acceptance.tau_by(runs, convention="dedit").iloc[0]
    complete = [5, 5, 1, 5, 3, 5]
    assert deer["cycles"] == dedit["cycles"] == 6
    assert deer["tau"] == pytest.approx(np.mean(complete) - 1) and dedit["tau"] == pytest.approx(np.mean(complete))
    assert deer["accepted_drafts"] == dedit["accepted_drafts"] == pytest.approx(deer["tau"])
    assert deer["tokens_per_cycle"] == pytest.approx(dedit["tau"])
    hist = acceptance.histogram(runs, convention="deer").set_index("length")["count"]
    assert hist.to_dict() == {0: 1, 2: 1, 4: 4}                         # h = a - 1; max is k, never k + 1
    assert acceptance.histogram(runs, convention="dedit")["length"].max() == 5
    dist = acceptance.length_distribution(runs, convention="deer", long_at=4).iloc[0]
    assert dist["max_length"] == 4 and dist["share_ge_4"] == pytest.approx(4 / 6)
    # full acceptance is the top of the band in either unit, and the same cycles fall in it
    deer_test = acceptance.resurgence_test(runs, "m", convention="deer", band=2)
    dedit_test = acceptance.resurgence_test(runs, "m", convention="dedit", band=2)
    assert deer_test["top_band"] == [3, 4] and dedit_test["top_band"] == [4, 5]
    assert deer_test["cycles_top"] == dedit_test["cycles_top"] == 4
    assert deer_test["cycles_below"] == dedit_test["cycles_below"] == 1
    for bad in ("paper", None, "DEER"):
        with pytest.raises(ValueError, match="convention must be one of"):
            acceptance.tau_by(runs, convention=bad)


def test_decode_by_temperature_names_a_bad_stochastic_prompts():
    """Table 1's decodes refuse a bad prompt count before decoding anything."""
    from spec_lib.studies.block_drafting import decode_by_temperature

    for bad in (-1, 1.5, True, "8"):
        with pytest.raises(ValueError, match="stochastic_prompts must be an int >= 0"):
            decode_by_temperature(None, {"s": [[1, 2]]}, [], [0.0, 1.0], stochastic_prompts=bad)
