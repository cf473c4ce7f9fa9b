"""Sampling sanity (seed 000, Theorem 3.3): at temperature > 0 the first three tokens of
every schedule follow the exact tempered AR law (chi-square), and deliberately wrong
variants are caught.  The full statistical study is notebook 03."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from spec_lib import decode
from spec_lib.toy import MarkovLM

N = 3000          # controls' p at N = 3000: <= 3e-9 (linear without residual is the weakest)
ALPHA = 1e-3            # correct algorithms must pass at this level (seeds are fixed)
PROMPT = [1]


def exact_law(toy, temperature, length=3):
    law = {}
    for seq in itertools.product(range(toy.vocab_size), repeat=length):
        prob, ctx = 1.0, list(PROMPT)
        for x in seq:
            p = toy.next_token_probs(ctx) ** (1.0 / temperature)
            prob *= p[x] / p.sum()
            ctx.append(x)
        law[seq] = prob
    return law


def p_value(schedule, temperature=1.0, **kwargs):
    toy = MarkovLM(4, seed=7, draft_noise=0.5)
    law = exact_law(toy, temperature)
    counts = dict.fromkeys(law, 0)
    for i in range(N):
        res = decode(toy, PROMPT, schedule=schedule, width=3, max_new_tokens=3, temperature=temperature,
                     seed=i, **kwargs)
        counts[tuple(res.tokens)] += 1
    keys = list(law)
    return stats.chisquare(np.array([counts[k] for k in keys]), N * np.array([law[k] for k in keys])).pvalue


@pytest.mark.parametrize("schedule", ["ar", "linear", "quadratic", "packed"])
def test_first_three_tokens_follow_the_target(schedule):
    assert p_value(schedule) > ALPHA


def test_packed_at_temperature_half_and_top_k_truncated_q():
    assert p_value("packed", temperature=0.5) > ALPHA
    assert p_value("packed", draft_top_k=2) > ALPHA
    assert p_value("linear", draft_top_p=0.6) > ALPHA


@pytest.mark.parametrize("schedule,ablation", [("packed", "no_residual"), ("linear", "no_residual"),
                                               ("quadratic", "no_residual"), ("packed", "fresh_q"),
                                               ("packed", "resample_without_q")])
def test_negative_controls_are_caught(schedule, ablation):
    assert p_value(schedule, ablation=ablation) < 1e-6
