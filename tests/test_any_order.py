"""Any-order verification (seed 000, App. C, D.2, E.2, E.6): SetDLM-form layouts and their row
counts, Proposition C.1 (every schedule equals the serial reference, on the exact toy and on a
transformers model in float64) with negative controls, left-to-right identity, stop sequences
(any-order and left-to-right schedules), the native decoder, and bad input."""

from __future__ import annotations

import pytest
import torch

import spec_lib
from spec_lib.anyorder_models import AnyOrderLM, ExactAnyOrderLM
from spec_lib.architectures import build_qwen3
from spec_lib.masks import call_kind
from spec_lib.masks.anyorder import KINDS, any_order_rows, build_any_order
from spec_lib import decode
from spec_lib.schedules.anyorder import confidence_order, serial_greedy, serial_reference
from spec_lib.toy import MarkovLM

SPECULATIVE = ("linear", "packed", "quadratic")


def random_policy(seed: int):
    gen = torch.Generator().manual_seed(seed)

    def policy(positions, scores):
        return positions[torch.randperm(positions.numel(), generator=gen)]
    return policy


def run_and_reference(model, prompt, schedule, order, width=4, length=28, eos=0, stops=None, ablation=None):
    result = decode(model, prompt, schedule=schedule, width=width, max_new_tokens=length, order=order,
                              eos_token_id=eos, stop_sequences=stops, trace=True, ablation=ablation)
    tokens, drafts = serial_reference(model, prompt, result.extras["trace"], max_new_tokens=length,
                                      eos_token_id=eos, stop_sequences=stops)
    drafts_ok = all(step["drafted"] == expected for step, expected in zip(result.extras["trace"], drafts))
    return result, tokens, drafts_ok


# ----- layouts -----------------------------------------------------------------------------------------

def test_packed_layout_follows_app_d2_rules():
    """The worked example (u = 3, pi = (2, 1, 3), drafts at ranks 1 and 2, p = 1): N, O, M, R
    rows, shared position ids per rank, and the visibility App. D.2 prescribes."""
    lay = build_any_order("ao_packed", new_ids=torch.tensor([7]), new_positions=torch.tensor([13]),
                          order_positions=torch.tensor([15, 14, 16]), draft_ids=torch.tensor([4, 5, -1]),
                          mask_token_id=99)
    assert lay.roles == ("N", "O", "O", "O", "M", "M", "M", "R", "R", "R")
    assert lay.position_ids.tolist() == [13, 15, 14, 16, 15, 14, 16, 15, 14, 16]
    assert lay.input_ids.tolist() == [7, 4, 5, 99, 99, 99, 99, 99, 99, 99]
    expected = torch.tensor([
        [1, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0, 0, 0, 0, 0],
        [1, 1, 1, 1, 0, 0, 0, 0, 0, 0],
        [1, 0, 0, 0, 1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 1, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0, 1, 0, 0, 0],
        [1, 0, 0, 0, 0, 0, 0, 1, 0, 0],
        [1, 0, 0, 0, 0, 0, 0, 0, 1, 0],
        [1, 0, 0, 0, 0, 0, 0, 0, 0, 1]], dtype=torch.bool)
    assert torch.equal(lay.visible(), expected)
    assert lay.verify_rows.tolist() == [4, 5, 6] and lay.draft_rows.tolist() == [[7, 8, 9]]


def test_missing_draft_in_the_middle_is_not_seen():
    """K_r holds only earlier ranks with a draft: an O row holding MASK is invisible to later ranks."""
    lay = build_any_order("ao_packed", new_ids=torch.tensor([], dtype=torch.long),
                          new_positions=torch.tensor([], dtype=torch.long), order_positions=torch.tensor([5, 6, 7]),
                          draft_ids=torch.tensor([3, -1, 4]), mask_token_id=9)
    vis = lay.visible()
    o, m = [0, 1, 2], [3, 4, 5]
    assert vis[m[2], o[0]] and not vis[m[2], o[1]] and not vis[m[2], o[2]]
    assert vis[o[2], o[0]] and not vis[o[2], o[1]]


def test_quadratic_branch_k_sees_ranks_up_to_k():
    lay = build_any_order("ao_quadratic", new_ids=torch.tensor([1]), new_positions=torch.tensor([4]),
                          order_positions=torch.tensor([6, 5, 7]), draft_ids=torch.tensor([2, 3, 4]), mask_token_id=9)
    vis = lay.visible()
    for k in range(3):
        for r in range(3):
            row = int(lay.draft_rows[k, r])
            assert vis[row, 1: 4].tolist() == [s < k for s in range(3)]
            assert vis[row, 0]                                    # N
    assert lay.rows == 1 + 2 * 3 + 9


@pytest.mark.parametrize("width, rows", [(8, {"packed": 25, "linear": 25, "quadratic": 81}),
                                         (16, {"packed": 49, "linear": 49, "quadratic": 289})])
def test_row_counts_match_table_2(width, rows):
    assert any_order_rows("ao_packed", 1, width) == rows["packed"]
    assert any_order_rows("ao_linear_draft", 1, width) + any_order_rows("ao_linear_verify", 1, width) == rows["linear"]
    assert any_order_rows("ao_quadratic", 1, width) == rows["quadratic"]
    for kind in KINDS:
        lay = build_any_order(kind, new_ids=torch.tensor([1]), new_positions=torch.tensor([3]),
                              order_positions=torch.arange(4, 4 + width), draft_ids=torch.arange(width),
                              mask_token_id=99)
        assert lay.rows == any_order_rows(kind, 1, width) == call_kind(kind).rows(1, width, width)


# ----- Proposition C.1 ---------------------------------------------------------------------------------

@pytest.mark.parametrize("schedule", SPECULATIVE)
@pytest.mark.parametrize("order", ["ltr", "confidence", "random"])
def test_every_schedule_equals_the_serial_reference_on_the_toy(schedule, order):
    for seed in range(4):
        model = ExactAnyOrderLM(8, 64, seed=seed)
        prompt = torch.tensor([seed + 1, 3, 2])
        policy = random_policy(seed) if order == "random" else order
        result, reference, drafts_ok = run_and_reference(model, prompt, schedule, policy, width=3 + seed % 3)
        assert result.tokens == reference and drafts_ok, (schedule, order, seed)
        # A_t counts what survived E at the time; a later EOS can discard earlier pairs
        assert sum(result.accepted) >= len(result.tokens)
        if order == "ltr":
            assert sum(result.accepted) == len(result.tokens)


@pytest.mark.parametrize("ablation", ["m_sees_own_o", "r_sees_o"])
def test_negative_controls_are_caught(ablation):
    """A verifier mask that sees its own draft token changes the output; draft masks that see
    tentative tokens change the drafts: the reference comparison catches both."""
    for seed in range(4):
        model = ExactAnyOrderLM(8, 64, seed=seed)
        prompt = torch.tensor([seed + 1, 2])
        result, reference, drafts_ok = run_and_reference(model, prompt, "packed", "confidence", width=6, length=40,
                                                         eos=None, ablation=ablation)
        assert result.tokens != reference or not drafts_ok, seed
        clean, reference, drafts_ok = run_and_reference(model, prompt, "packed", "confidence", width=6, length=40,
                                                        eos=None)
        assert clean.tokens == reference and drafts_ok


@pytest.fixture(scope="module")
def float64_model():
    return AnyOrderLM(build_qwen3(12, hidden_size=32, num_layers=2, num_heads=2, max_positions=96, seed=3,
                                  dtype=torch.float64), mask_token_id=11)


@pytest.mark.parametrize("schedule", SPECULATIVE)
def test_transformers_model_equals_the_serial_reference_in_float64(float64_model, schedule):
    for order in ("ltr", "confidence", random_policy(1)):
        result, reference, drafts_ok = run_and_reference(float64_model, torch.tensor([1, 5, 7]), schedule, order,
                                                         width=4, length=20)
        assert result.tokens == reference and drafts_ok


def test_ltr_outputs_are_identical_and_equal_serial_greedy(float64_model):
    prompt = torch.tensor([2, 4, 6, 8])
    serial = serial_greedy(float64_model, prompt, max_new_tokens=20, eos_token_id=0)
    for schedule in SPECULATIVE:
        result = spec_lib.decode(float64_model, prompt, schedule=schedule, width=5, max_new_tokens=20, order="ltr",
                                 eos_token_id=0)
        assert result.tokens == serial, schedule
    native = spec_lib.decode(float64_model, prompt, schedule="native", width=1, max_new_tokens=20, eos_token_id=0)
    assert native.tokens == serial                                # a window of one is serial greedy


def test_eos_before_accepted_positions_rebuilds_the_cache_exactly():
    """Confidence order accepts later positions first; an EOS accepted before them discards
    cached pairs, and the rebuilt cache keeps the run equal to the reference."""
    rebuilds = 0
    for seed in range(30):
        model = ExactAnyOrderLM(6, 64, seed=seed, sharpness=1.0)
        result, reference, drafts_ok = run_and_reference(model, torch.tensor([1, 2]), "packed", "confidence",
                                                         width=6, length=30)
        assert result.tokens == reference and drafts_ok
        rebuilds += result.extras["cache_rebuilds"]
    assert rebuilds > 0


def test_confidence_order_ranks_by_score_ties_by_position_missing_last():
    positions = torch.tensor([3, 4, 5, 6, 7])
    scores = torch.tensor([0.2, float("nan"), 0.9, 0.2, float("nan")], dtype=torch.float64)
    assert confidence_order(positions, scores).tolist() == [5, 3, 6, 4, 7]


# ----- stop sequences ----------------------------------------------------------------------------------

class ScriptedLM(ExactAnyOrderLM):
    """Predicts ``script[j]`` at output position j when it sees position j - 1 (or j is the first),
    else ``guess[j]``: drafts made without their left neighbour are ``guess``."""

    def __init__(self, script, guess, prompt_len):
        super().__init__(64, 96, seed=0)
        self.script, self.guess, self.n = torch.tensor(script), torch.tensor(guess), prompt_len

    def scores(self, query_positions, positions, tokens, visible):
        out = torch.zeros(query_positions.numel(), self.vocab_size, dtype=torch.float64)
        for i, q in enumerate(query_positions.tolist()):
            j = q - self.n
            sees_left = j == 0 or bool(((positions == q - 1) & visible[i] & (tokens != self.mask_token_id)).any())
            out[i, int(self.script[j] if sees_left else self.guess[j])] = 5.0
        return out


def boundaries(result) -> list[int]:
    """Output positions that end an iteration's accepted group (left to right order)."""
    ends, total = [], -1
    for a in result.accepted:
        total += a
        ends.append(total)
    return ends


@pytest.mark.parametrize("schedule", SPECULATIVE)
def test_any_order_stop_sequence_split_across_two_iterations(schedule):
    script = list(range(10, 40))
    model = ScriptedLM(script, script, prompt_len=2)                 # drafts always right
    prompt = torch.tensor([1, 2])
    free = decode(model, prompt, schedule=schedule, width=4, max_new_tokens=24)
    assert free.tokens == script[:24]
    b = boundaries(free)[1]                                         # the marker straddles this boundary
    marker = [script[b - 1], script[b], script[b + 1]]
    stopped = decode(model, prompt, schedule=schedule, width=4, max_new_tokens=24, stop_sequences=[marker],
                               trace=True)
    assert stopped.tokens == script[: b + 2]                         # ends with the whole marker
    assert stopped.nfe < free.nfe and len(stopped.accepted) >= 3


@pytest.mark.parametrize("schedule", SPECULATIVE)
def test_a_partially_accepted_marker_does_not_stop(schedule):
    """The drafts hold ``script[k], guess[k+1]`` (a marker) but the verifier rejects guess[k+1]:
    the marker is never accepted, so decoding runs to the length limit."""
    script = list(range(10, 40))
    guess = [t + 20 for t in script]
    model = ScriptedLM(script, guess, prompt_len=2)
    prompt = torch.tensor([1, 2])
    k = 3
    result = decode(model, prompt, schedule=schedule, width=4, max_new_tokens=16,
                              stop_sequences=[[script[k], guess[k + 1]]], trace=True)
    assert result.tokens == script[:16]
    tentative = [step for step in result.extras["trace"]
                 if dict(zip(step["order"], step["drafts"])).get(k + 1) == guess[k + 1]]
    assert tentative                                                 # the marker was drafted


@pytest.mark.parametrize("schedule", ["ar", "linear", "packed", "quadratic"])
def test_ltr_stop_sequences(schedule):
    """Left-to-right schedules stop once a marker is accepted, also when it is split across two
    iterations; the output is the AR output cut after the marker."""
    chain = MarkovLM(6, order=2, seed=3, concentration=0.3)
    prompt = torch.tensor([1, 2, 3])
    ar = spec_lib.decode(chain, prompt, schedule="ar", width=1, max_new_tokens=40).tokens
    free = spec_lib.decode(chain, prompt, schedule=schedule, width=4, max_new_tokens=40)
    assert free.tokens == ar
    ends = boundaries(free)
    cut = next(e for e in ends if 0 < e < 38)
    marker = ar[cut: cut + 2]                                        # split: cut ends one iteration
    first = next(i for i in range(len(ar) - 1) if ar[i: i + 2] == marker)
    stopped = spec_lib.decode(chain, prompt, schedule=schedule, width=4, max_new_tokens=40, stop_sequences=[marker])
    assert stopped.tokens == ar[: first + 2]
    assert sum(stopped.accepted) == len(stopped.tokens)


# ----- bad input ---------------------------------------------------------------------------------------

class CountingToy(ExactAnyOrderLM):
    calls = 0

    def prefill(self, *args):
        CountingToy.calls += 1
        return super().prefill(*args)


@pytest.mark.parametrize("policy, match", [
    (lambda positions, scores: positions[:-1], "permutation"),
    (lambda positions, scores: positions + 50, "permutation"),
    (lambda positions, scores: torch.cat([positions[:1], positions[:-1]]), "permutation"),
    ("random", "order must be one of"),
    (3, "order must be one of"),
])
def test_bad_order_policy_fails_before_any_call(policy, match):
    model = CountingToy(8, 64)
    CountingToy.calls = 0
    with pytest.raises(ValueError, match=match):
        decode(model, [1, 2], schedule="packed", width=4, max_new_tokens=8, order=policy)
    assert CountingToy.calls == 0


@pytest.mark.parametrize("stops, match", [([[]], "empty"), ([[1] * 9], "max_new_tokens"), ("ab", "token-id lists"),
                                          ([[1, -2]], "non-negative"), ([[1.5]], "non-negative")])
def test_bad_stop_sequences(stops, match):
    model = CountingToy(8, 64)
    CountingToy.calls = 0
    with pytest.raises(ValueError, match=match):
        decode(model, [1, 2], schedule="packed", width=4, max_new_tokens=8, stop_sequences=stops)
    with pytest.raises(ValueError, match=match):
        spec_lib.decode(MarkovLM(8), [1, 2], schedule="packed", width=4, max_new_tokens=8, stop_sequences=stops)
    assert CountingToy.calls == 0


def test_order_needs_an_any_order_model():
    with pytest.raises(ValueError, match="any-order mode"):
        spec_lib.decode(MarkovLM(8), [1, 2], schedule="packed", width=4, max_new_tokens=8, order="confidence")
    with pytest.raises(ValueError, match="any-order decoding only"):
        spec_lib.decode(MarkovLM(8), [1, 2], schedule="packed", width=4, max_new_tokens=8, trace=True)
    with pytest.raises(ValueError, match="greedy"):
        spec_lib.decode(ExactAnyOrderLM(8, 64), [1, 2], schedule="packed", width=4, max_new_tokens=8, temperature=1.0)


@pytest.mark.parametrize("kwargs, match", [
    ({"schedule": "ar"}, "does not run under order="), ({"width": 0}, "width"), ({"max_new_tokens": -1}, "max_new_tokens"),
    ({"max_new_tokens": 100}, "positions"), ({"eos_token_id": 8}, "eos_token_id"), ({"threshold": 0}, "threshold"),
    ({"ablation": "x"}, "ablation"),
])
def test_bad_arguments(kwargs, match):
    args = {"schedule": "packed", "width": 4, "max_new_tokens": 8} | kwargs
    with pytest.raises(ValueError, match=match):
        decode(CountingToy(8, 64), [1, 2], **args)


def test_native_commits_the_most_confident_and_all_above_threshold():
    model = ExactAnyOrderLM(8, 64, seed=2)
    loose = decode(model, [1, 2], schedule="native", width=6, max_new_tokens=30, threshold=0.5)
    strict = decode(model, [1, 2], schedule="native", width=6, max_new_tokens=30, threshold=1.0)
    assert all(a == 1 for a in strict.accepted)                      # threshold 1: only the most confident
    assert max(loose.accepted) > 1 and loose.nfe < strict.nfe
    assert len(loose.tokens) == len(strict.tokens) == 30


def test_concurrent_decodes_share_one_model(float64_model):
    """Decode state is per thread: two threads decoding different prompts with one model get what
    each gets alone."""
    from concurrent.futures import ThreadPoolExecutor

    prompts = [torch.tensor([1, 2, 3]), torch.tensor([4, 5])]
    alone = [decode(float64_model, p, schedule="packed", width=4, max_new_tokens=16,
                              order="confidence").tokens for p in prompts]
    with ThreadPoolExecutor(2) as pool:
        together = list(pool.map(lambda p: decode(float64_model, p, schedule="packed", width=4,
                                                            max_new_tokens=16, order="confidence").tokens,
                                 prompts * 3))
    assert together == alone * 3


def test_ltr_stop_sequences_when_sampling():
    """Sampling with a stop sequence: the output ends at the marker's first occurrence, and it is
    the output of the same seeded run without the marker, cut there."""
    chain = MarkovLM(5, order=1, seed=2, draft_noise=0.3)
    free = spec_lib.decode(chain, [1, 2], schedule="packed", width=4, max_new_tokens=60, temperature=1.0, seed=3)
    marker = free.tokens[20:22]
    first = next(i for i in range(len(free.tokens) - 1) if free.tokens[i: i + 2] == marker)
    stopped = spec_lib.decode(chain, [1, 2], schedule="packed", width=4, max_new_tokens=60, temperature=1.0, seed=3,
                              stop_sequences=[marker])
    assert stopped.tokens == free.tokens[: first + 2]
