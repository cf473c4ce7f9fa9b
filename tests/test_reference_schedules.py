"""Algorithm 1 step by step: greedy schedules on the exact toy model against slow
references written here directly from the pseudocode (seed 000, Algorithm 1; Sec. 1 and
Sec. 3.1 for Linear-SS and Quadratic-SS; App. D.3 for rows)."""

from __future__ import annotations

import numpy as np
import pytest

from spec_lib import decode
from spec_lib.toy import MarkovLM


def _accept(P, prompt, D, v, L, eos):
    """Algorithm 1 lines 5-9: matches, C_t, ending condition a, new prefix."""
    h = 0
    while h < len(D) and D[h] == v[h]:
        h += 1
    C = D[:h] + [v[h]]
    candidates = [h + 1, L + len(prompt) - len(P)] + [i + 1 for i, c in enumerate(C) if c == eos]
    a = min(candidates)
    return P + C[:a], a


def _running(P, prompt, L, eos, t):
    return len(P) - len(prompt) < L and (t == 1 or P[-1] != eos)         # Algorithm 1 line 2


def ref_packed(toy, prompt, W, L, eos):
    P, D, t, accepted, nfe = list(prompt), [], 1, [], 0
    while _running(P, prompt, L, eos, t):
        nfe += 1                                                          # one call (lines 3-4)
        v = [int(np.argmax(toy.next_token_probs(P + D[:i]))) for i in range(len(D) + 1)]
        z = [int(x) for x in np.argmax(toy.draft_probs(P, W), axis=1)]   # Z_t from P_{t-1}
        P, a = _accept(P, prompt, D, v, L, eos)
        D = z[a:]                                                         # line 10
        accepted.append(a)
        t += 1
    return P[len(prompt):], nfe, accepted


def ref_linear(toy, prompt, W, L, eos):
    P, t, accepted, nfe = list(prompt), 1, [], 0
    while _running(P, prompt, L, eos, t):
        nfe += 2                                                          # draft call, verify call
        D = [int(x) for x in np.argmax(toy.draft_probs(P, W), axis=1)]   # from the newest prefix
        v = [int(np.argmax(toy.next_token_probs(P + D[:i]))) for i in range(W + 1)]
        P, a = _accept(P, prompt, D, v, L, eos)
        accepted.append(a)
        t += 1
    return P[len(prompt):], nfe, accepted


def ref_quadratic(toy, prompt, W, L, eos):
    P, D, t, accepted, nfe = list(prompt), [], 1, [], 0
    while _running(P, prompt, L, eos, t):
        nfe += 1
        v = [int(np.argmax(toy.next_token_probs(P + D[:i]))) for i in range(len(D) + 1)]
        before = list(P)
        P, a = _accept(P, prompt, D, v, L, eos)
        h = a - 1
        # Selected branch: drafted from P_{t-1}, d1..dh (all of P_t but its last token).
        branch = [int(x) for x in np.argmax(toy.draft_probs(before + D[:h], W + 1), axis=1)]
        D = branch[1:]
        accepted.append(a)
        t += 1
    return P[len(prompt):], nfe, accepted


def ref_ar(toy, prompt, L, eos):
    P, t = list(prompt), 1
    while _running(P, prompt, L, eos, t):
        P.append(int(np.argmax(toy.next_token_probs(P))))
        t += 1
    return P[len(prompt):]


REFERENCES = {"packed": ref_packed, "linear": ref_linear, "quadratic": ref_quadratic}


@pytest.mark.parametrize("schedule", list(REFERENCES))
@pytest.mark.parametrize("order", [1, 2])
def test_greedy_schedules_follow_their_pseudocode(schedule, order):
    checked = 0
    for seed in range(6):
        toy = MarkovLM(6, order=order, seed=seed, eos_token_id=5, draft_noise=0.15 * (seed % 4),
                       concentration=0.4)
        rng = np.random.default_rng(seed)
        for W in (1, 2, 4, 7):
            for L in (0, 1, 5, 19):
                for eos in (None, 5):
                    prompt = rng.integers(0, 5, size=int(rng.integers(order, 5))).tolist()
                    tokens, nfe, accepted = REFERENCES[schedule](toy, prompt, W, L, eos)
                    res = decode(toy, prompt, schedule=schedule, width=W, max_new_tokens=L, eos_token_id=eos)
                    assert (res.tokens, res.nfe, res.accepted) == (tokens, nfe, accepted), \
                        (schedule, seed, W, L, eos, prompt)
                    assert res.tokens == ref_ar(toy, prompt, L, eos)
                    assert len(res.rows_per_call) == res.nfe
                    checked += 1
    assert checked == 6 * 4 * 4 * 2


def test_rows_per_call_in_steady_state():
    toy = MarkovLM(6, seed=0, draft_noise=0.3)
    W, B = 7, 8
    packed = decode(toy, [1, 2, 3], schedule="packed", width=W, max_new_tokens=30)
    linear = decode(toy, [1, 2, 3], schedule="linear", width=W, max_new_tokens=30)
    quadratic = decode(toy, [1, 2, 3], schedule="quadratic", width=W, max_new_tokens=30)
    ar = decode(toy, [1, 2, 3], schedule="ar", width=W, max_new_tokens=30)
    assert packed.rows_per_call[0] == 2 + 2 * B and set(packed.rows_per_call[1:]) == {2 * B}
    assert linear.rows_per_call[:2] == [2 + B, B] and set(linear.rows_per_call[2:]) == {B}
    assert quadratic.rows_per_call[0] == 2 + 1 + B and set(quadratic.rows_per_call[1:]) == {B * (B + 1)}
    assert ar.rows_per_call == [3] + [1] * 29


def test_empty_output_makes_no_call():
    toy = MarkovLM(4, seed=0)
    for schedule in ("ar", "linear", "quadratic", "packed"):
        res = decode(toy, [1], schedule=schedule, width=3, max_new_tokens=0)
        assert (res.tokens, res.nfe, res.accepted, res.rows_per_call) == ([], 0, [], [])
