"""Verification rules: greedy matching (Eq. 1-2) and rejection sampling (Algorithm 2
lines 5-7, Lemma B.3), with dense and sparse (top-k / top-p) stored Q."""

from __future__ import annotations

import pytest
import torch

from spec_lib import verify


def emitted_law(p, q, residual=True):
    """Closed-form law of the emitted token of one accept/residual step (Lemma B.3 proof)."""
    accept = torch.minimum(p, q)
    beta = accept.sum()
    correction = torch.clamp(p - q, min=0) if residual else p
    correction = correction / correction.sum() if correction.sum() > 0 else correction
    return accept + (1 - beta) * correction


def random_pair(kind, vocab=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    p = torch.distributions.Dirichlet(torch.ones(vocab)).sample()
    if kind == "random":
        q = torch.rand(vocab, generator=g) ** 3
    elif kind == "equal":
        q = p.clone()
    elif kind == "disjoint":
        p = torch.zeros(vocab, dtype=torch.float64); p[:3] = torch.tensor([0.2, 0.3, 0.5])
        q = torch.zeros(vocab, dtype=torch.float64); q[3:] = 0.25
    elif kind == "point":
        q = torch.zeros(vocab); q[2] = 1.0
    return p.double(), (q / q.sum()).double()


@pytest.mark.parametrize("kind", ["random", "equal", "disjoint", "point"])
def test_lemma_b3_closed_form_and_simulation(kind):
    p, q = random_pair(kind, seed=3)
    assert torch.allclose(emitted_law(p, q), p, atol=1e-12)
    # Simulation of the implementation: draft d ~ Q, then verify one position.
    gen = torch.Generator().manual_seed(0)
    n = 10_000
    draft = torch.multinomial(q, n, replacement=True, generator=gen)
    counts = torch.zeros_like(p)
    target = torch.stack([p, p])                                       # p^(1) and the bonus row
    for d in draft.tolist():
        _, emitted = verify.rejection_verify(torch.tensor([d]), q[None], target, gen)
        counts[emitted[0]] += 1
    freq = counts / n
    assert (freq - p).abs().max() <= 5 * torch.sqrt(p * (1 - p) / n).max() + 1e-9


def test_greedy_verify_counts_leading_matches():
    logits = torch.full((5, 10), -1.0)
    logits[torch.arange(5), torch.tensor([4, 2, 7, 7, 1])] = 3.0
    for draft, h in [([4, 2, 7, 7], 4), ([4, 2, 0, 7], 2), ([9, 2, 7, 7], 0), ([], 0)]:
        got_h, verifier = verify.greedy_verify(torch.tensor(draft, dtype=torch.long), logits[: len(draft) + 1])
        assert int(got_h) == h
        assert verifier.tolist() == [4, 2, 7, 7, 1][: len(draft) + 1]


def test_sparse_q_matches_dense_q_exactly():
    gen = torch.Generator().manual_seed(1)
    q = torch.softmax(torch.randn(4, 50, generator=gen, dtype=torch.float64), -1)
    sparse = verify.truncate(q, top_k=5)
    dense = sparse.dense()
    assert torch.allclose(dense.sum(-1), torch.ones(4, dtype=torch.float64))
    assert ((dense > 0).sum(-1) == 5).all()
    p = torch.softmax(torch.randn(5, 50, generator=gen, dtype=torch.float64), -1)
    draft = sparse.sample(gen)
    for seed in range(20):
        a = verify.rejection_verify(draft, sparse, p, torch.Generator().manual_seed(seed))
        b = verify.rejection_verify(draft, dense, p, torch.Generator().manual_seed(seed))
        assert int(a[0]) == int(b[0]) and torch.equal(a[1], b[1])


def test_top_p_keeps_the_smallest_prefix_reaching_p():
    q = torch.tensor([[0.5, 0.3, 0.15, 0.05]], dtype=torch.float64)
    kept = verify.truncate(q, top_p=0.8).dense()
    assert torch.allclose(kept, torch.tensor([[0.625, 0.375, 0.0, 0.0]], dtype=torch.float64))
    assert torch.allclose(verify.truncate(q, top_p=0.01).dense(), torch.tensor([[1.0, 0, 0, 0]], dtype=torch.float64))


def test_lemma_b3_with_top_k_truncated_q():
    p, q = random_pair("random", seed=5)
    q_k = verify.truncate(q[None], top_k=3).dense()[0]
    assert torch.allclose(emitted_law(p, q_k), p, atol=1e-12)


def test_dropping_the_residual_is_biased():
    """Negative control: drawing the correction from p instead of [p - Q]_+ is wrong."""
    p, q = random_pair("random", seed=3)
    assert (emitted_law(p, q, residual=False) - p).abs().max() > 1e-2


def test_probabilities_reject_non_positive_temperature():
    with pytest.raises(ValueError, match="temperature must be > 0"):
        verify.probabilities(torch.zeros(3), 0.0)
