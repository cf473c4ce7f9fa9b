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


class _WordTokenizer:
    """One id per distinct word, as a Hugging Face tokenizer is called."""

    def __init__(self):
        self.ids: dict[str, int] = {}

    def __call__(self, texts, add_special_tokens=False):
        return {"input_ids": [[self.ids.setdefault(w, len(self.ids)) for w in t.split()] for t in texts]}


@pytest.fixture
def real_text(monkeypatch):
    """Two prompts per slice "s": the real continuation of prompt 0 loops (5 of its 12 tokens close a
    seen 4-gram), that of prompt 1 never repeats."""
    from spec_lib.studies import slices
    from spec_lib.training import data

    texts = ["x y z w x y z w x y z w", "p q r s t u"]
    monkeypatch.setattr(slices, "eval_examples", lambda name, n, seed=0: [data.EvalExample("", t) for t in texts[:n]])
    return _WordTokenizer()


def _runs(rows):
    return pd.DataFrame([{"slice": "s", "sample": 0, **r} for r in rows])


def test_repetition_report_reads_loops_against_the_real_text(real_text):
    loop = [1, 2, 3, 4] * 5                                   # 13 of 20 tokens close a seen 4-gram (from index 7)
    runs = _runs([
        {"prompt": 0, "method": "spec", "schedule": "linear", "output": loop, "accepted": [4, 4, 4, 4, 4]},
        {"prompt": 1, "method": "spec", "schedule": "linear", "output": list(range(20)), "accepted": [10, 5, 5]},
        {"prompt": 0, "method": "ar", "schedule": "ar", "output": loop, "accepted": [1] * 20},
        {"prompt": 1, "method": "ar", "schedule": "ar", "output": list(range(20)), "accepted": [1] * 20}])
    report = repetition.repetition_report(runs, real_text, {"s": 2}, 100).set_index("method")
    assert list(report.columns) == ["slice", *repetition.REPORT_COLUMNS]
    spec, ar = report.loc["spec"], report.loc["ar"]
    assert spec["responses"] == ar["responses"] == 2
    assert spec["repetition"] == ar["repetition"] == pytest.approx((13 / 20 + 0) / 2)
    assert spec["reference_repetition"] == pytest.approx((5 / 12 + 0) / 2)
    # the loop's first iteration is fresh, its other four touch repeated text; the fresh output's three are fresh
    assert (spec["fresh_iterations"], spec["repeated_iterations"]) == (4, 4)
    assert spec["fresh_tokens_per_iteration"] == pytest.approx((4 + 10 + 5 + 5) / 4)
    assert spec["repeated_tokens_per_iteration"] == 4.0
    # plain AR keeps its repetition share and has no draft to split
    assert ar[list(repetition.REPORT_COLUMNS[3:])].isna().all()


def test_repetition_report_negative_controls(real_text):
    """A looped output reads near 1 and lands in the repeated column; reordering the same accepted
    lengths moves iterations between the columns; a fresh output and fresh real text read 0."""
    looped = [7] * 200                                        # every token from index 4 on repeats
    report = repetition.repetition_report(
        _runs([{"prompt": 1, "method": "m", "output": looped, "accepted": [1] + [3] * 66 + [1]}]),
        real_text, {"s": 2}, 100).iloc[0]
    assert report["repetition"] > 0.95 and report["reference_repetition"] == 0.0
    assert (report["fresh_iterations"], report["repeated_iterations"]) == (2, 66)

    output = [9, 8, 7, 6, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4]  # repeated from index 11 on
    split = {}
    for order in ([8, 2, 6], [6, 8, 2]):
        row = repetition.repetition_report(_runs([{"prompt": 0, "method": "m", "output": output, "accepted": order}]),
                                           real_text, {"s": 2}, 100).iloc[0]
        split[tuple(order)] = (row["fresh_iterations"], row["fresh_tokens_per_iteration"],
                               row["repeated_iterations"], row["repeated_tokens_per_iteration"])
    assert split[(8, 2, 6)] == (2, 5.0, 1, 6.0) and split[(6, 8, 2)] == (1, 6.0, 2, 5.0)

    fresh = repetition.repetition_report(_runs([{"prompt": 1, "method": "m", "output": list(range(30)),
                                                 "accepted": [3] * 10}]), real_text, {"s": 2}, 100).iloc[0]
    assert fresh["repetition"] == 0.0 and fresh["repeated_iterations"] == 0
    assert np.isnan(fresh["repeated_tokens_per_iteration"]) and fresh["fresh_tokens_per_iteration"] == 3.0


def test_repetition_report_by_temperature_prompt_subsets_and_bad_input(real_text):
    """``{temperature: runs}`` groups by temperature first; the real text's share is that of the
    prompts each group decoded (T > 0 on prompt 0 only here), cut to the cap; misaligned
    accepted lengths and missing columns are refused."""
    greedy = _runs([{"prompt": p, "method": "m", "output": [1, 2, 3], "accepted": [2, 1]} for p in (0, 1)])
    report = repetition.repetition_report({0.0: greedy, 1.0: greedy[greedy["prompt"] == 0]}, real_text,
                                          {"s": 2}, {"s": 8})
    assert list(report.columns[:3]) == ["temperature", "slice", "method"]
    by_t = report.set_index("temperature")["reference_repetition"]
    assert by_t[1.0] == pytest.approx(1 / 8) and by_t[0.0] == pytest.approx(1 / 16)   # prompt 0 cut to 8 tokens
    with pytest.raises(ValueError, match="add up to 4, the output has 3 tokens"):
        repetition.repetition_report(_runs([{"prompt": 0, "method": "m", "output": [1, 2, 3], "accepted": [2, 2]}]),
                                     real_text, {"s": 2}, 8)
    with pytest.raises(ValueError, match=r"lack the columns \['accepted'\]"):
        repetition.repetition_report(greedy.drop(columns=["accepted"]), real_text, {"s": 2}, 8)


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


def test_reasoning_and_summary_slices_are_multi_step_problems_with_their_solution_visible_or_not():
    """Seed 002's Reasoning and Summary slices from local word problems: reasoning prompts end at
    "Answer:" and continue with a worked solution of two or more steps; summary prompts hold that
    solution and continue with its answer line; the other slices are the training data's."""
    from spec_lib.studies import slices
    from spec_lib.training import data

    reasoning, summary = slices.eval_examples("reasoning", 5), slices.eval_examples("summary", 5)
    for r, s in zip(reasoning, summary):
        assert r.prompt.endswith("Answer:") and r.reference.count("=") >= 2
        assert s.prompt == r.prompt + r.reference.split(" ####")[0] and s.reference.startswith(" #### ")
    assert slices.eval_slice("reasoning", 3, seed=1) != slices.eval_slice("reasoning", 3, seed=0)
    assert slices.eval_examples("math", 3) == data.eval_examples("math", 3)
    with pytest.raises(ValueError, match="slice must be one of"):
        slices.eval_examples("poetry", 2)
