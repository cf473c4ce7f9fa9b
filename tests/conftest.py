"""Shared fixtures: tiny transformers models (random and briefly dual-mode trained)."""

from __future__ import annotations

import copy

import pytest
import torch

from spec_lib.models import DualModeLM, build_qwen3
from spec_lib.toy import MarkovLM
from spec_lib.training.self_speculative import fit_dual_mode

VOCAB = 48            # token ids 0..46 are text, 47 is MASK
MASK_ID = VOCAB - 1


@pytest.fixture(scope="session")
def random_hf_model():
    """A randomly initialised tiny Qwen3 in float64 (drafts almost never match)."""
    return build_qwen3(VOCAB, hidden_size=32, num_layers=2, num_heads=4, max_positions=256, seed=1,
                       dtype=torch.float64)


@pytest.fixture(scope="session")
def trained_hf_model():
    """A tiny Qwen3 trained for a few seconds in both modes on a predictable Markov chain,
    so that its diffusion drafts are often accepted (multi-token acceptance is exercised)."""
    chain = MarkovLM(VOCAB - 1, seed=3, concentration=0.05)
    model = build_qwen3(VOCAB, hidden_size=64, num_layers=2, num_heads=4, max_positions=256, seed=2)
    fit_dual_mode(model, chain.sample_sequences(512, 48, seed=4), steps=250, batch_size=16, width=8,
                  mask_token_id=MASK_ID, seed=5, progress=False)
    model.chain = chain                     # the data source, for drawing in-distribution prompts
    return model


def as_dual(hf_model, dtype=torch.float64) -> DualModeLM:
    """A DualModeLM over a copy of ``hf_model`` in ``dtype`` (fixtures stay untouched)."""
    return DualModeLM(copy.deepcopy(hf_model).to(dtype), mask_token_id=MASK_ID)


def prompts(n: int, seed: int, chain: MarkovLM | None = None, low: int = 3, high: int = 12) -> list[torch.Tensor]:
    """``n`` prompts of random lengths; from ``chain`` when given, else uniform tokens."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(low, high, (n,), generator=gen).tolist()
    if chain is not None:
        rows = chain.sample_sequences(n, high, seed=seed)
        return [rows[i, :length] for i, length in enumerate(lengths)]
    return [torch.randint(0, MASK_ID, (length,), generator=gen) for length in lengths]
