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
