"""The unlikelihood lever (Welleck et al. 2020) of the self-speculative model's stage 2: the
repeated-4-gram candidates are the notebooks' repetition measure, the term is -log(1 - p),
finite at p = 1, lowers p when followed, and a pushed-down token is not also a target."""

from __future__ import annotations

import math

import pytest
import torch

from spec_lib.training.dual_mode import dual_mode_loss, make_dual_mode_batch
from spec_lib.training.unlikelihood import repeated_ngrams, unlikelihood
from spec_lib.architectures import build_qwen3


def _reference(tokens, n):
    seen, out = set(), []
    for i in range(len(tokens)):
        gram = tuple(tokens[max(0, i - n + 1): i + 1])
        out.append(i >= n - 1 and gram in seen)
        if i >= n - 1:
            seen.add(gram)
    return out


@pytest.mark.parametrize("n", [1, 2, 4])
def test_repeated_ngrams_is_the_sequential_measure(n):
    rows = torch.randint(0, 3, (6, 40), generator=torch.Generator().manual_seed(n))
    got = repeated_ngrams(rows, n)
    assert got.tolist() == [_reference(r.tolist(), n) for r in rows]
    assert got.any() and not got.all()
    loop = torch.tensor([[1, 2, 3, 4, 5] * 4])
    assert repeated_ngrams(loop, 4)[0].tolist() == [False] * 8 + [True] * 12
    assert not repeated_ngrams(torch.arange(30)[None], 4).any()


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="tokens must be"):
        repeated_ngrams(torch.arange(5), 4)
    with pytest.raises(ValueError, match="n must be"):
        repeated_ngrams(torch.arange(5)[None], 0)


def test_the_term_is_minus_log_one_minus_p_and_finite_at_p_one():
    logits = torch.tensor([[0.0, 0.0, math.log(2.0)], [0.0, 0.0, 0.0]])
    candidates = torch.tensor([2, -100])
    assert torch.isclose(unlikelihood(logits, candidates), torch.tensor(-math.log(1 - 0.5)))
    certain = unlikelihood(torch.tensor([[0.0, 100.0]]), torch.tensor([1]))
    assert torch.isfinite(certain) and certain > 10
    assert unlikelihood(logits, torch.tensor([-100, -100])) == 0


def test_one_step_on_the_term_lowers_the_candidates_probability_and_masks_its_target():
    model = build_qwen3(32, hidden_size=32, num_layers=1, num_heads=2, max_positions=64, seed=0).float()
    rows = torch.tensor([[3, 4, 5, 6, 3, 4, 5, 6, 3, 4, 5, 6]])
    unlikely = repeated_ngrams(rows, 4)
    batch = make_dual_mode_batch(rows, width=3, n_blocks=1, mask_token_id=31, generator=torch.Generator().manual_seed(0),
                                 unlikely=unlikely)
    pushed = batch.ul_labels >= 0
    assert pushed[0, 6:11].all() and not pushed[0, :6].any()
    assert (batch.ar_labels[pushed] == -100).all() and (batch.ar_labels[~pushed][:-1] >= 0).all()

    def p_candidates():
        with torch.no_grad():
            probs = model(input_ids=rows).logits.softmax(-1)[0, :-1]
        return probs.gather(-1, rows[0, 1:, None])[:, 0][pushed[0, :-1]]

    before = p_candidates()
    loss, parts = dual_mode_loss(model, batch, unlikelihood_weight=1.0)
    assert parts["unlikelihood"] > 0
    plain, plain_parts = dual_mode_loss(model, batch)
    assert "unlikelihood" not in plain_parts and torch.isclose(loss - plain, torch.tensor(parts["unlikelihood"]))
    model.zero_grad()
    unlikelihood(model(input_ids=rows).logits[0], batch.ul_labels[0]).backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.5 * p.grad
    assert (p_candidates() < before).all()
