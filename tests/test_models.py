"""DualModeLM: masks honoured, the cache holds only verified tokens, bad mask ids rejected."""

from __future__ import annotations

import pytest
import torch

from spec_lib.models import DualModeLM

from .conftest import MASK_ID, VOCAB, as_dual

TOL = 1e-5


def causal_logits(hf_model, ids):
    with torch.inference_mode():
        return hf_model(input_ids=ids[None]).logits[0]


def test_packed_call_reproduces_causal_and_drafting_logits(trained_hf_model):
    model = as_dual(trained_hf_model, torch.float32)
    width = 6
    prefix = trained_hf_model.chain.sample_sequences(1, 12, seed=0)[0]
    draft = torch.tensor([3, 9, 14, 1])                                          # m = 4 < W: padded
    # A separate drafting call from the prefix (it also processes the prompt into the cache).
    model.reset()
    drafting = model.call("linear_draft", prefix, draft[:0], width)
    model.commit(0)
    assert model.cache_len == prefix.numel() - 1
    packed = model.call("packed", prefix, draft, width)
    expected = causal_logits(model.hf_model, torch.cat([prefix, draft]))[prefix.numel() - 1:]
    assert packed.rows == 2 * (width + 1)
    assert (packed.target_logits - expected).abs().max() <= TOL                  # verify rows
    assert (packed.draft_logits - drafting.draft_logits).abs().max() <= TOL      # proposal rows


def test_quadratic_branch_equals_a_fresh_call_from_the_longer_prefix(trained_hf_model):
    model = as_dual(trained_hf_model, torch.float32)
    width = 4
    prefix = trained_hf_model.chain.sample_sequences(1, 10, seed=1)[0]
    draft = torch.tensor([5, 6, 7, 8])
    model.reset()
    model.call("linear_draft", prefix, draft[:0], width)
    model.commit(0)
    quad = model.call("quadratic", prefix, draft, width)
    assert quad.rows == (width + 1) * (width + 2)
    expected = causal_logits(model.hf_model, torch.cat([prefix, draft]))[prefix.numel() - 1:]
    assert (quad.target_logits - expected).abs().max() <= TOL
    for k in (0, 2, 4):
        fresh = as_dual(trained_hf_model, torch.float32)
        fresh.reset()
        branch0 = fresh.call("quadratic", torch.cat([prefix, draft[:k]]), draft[:0], width)
        assert (quad.draft_logits[k] - branch0.draft_logits[0]).abs().max() <= TOL, k


def test_cache_keeps_only_verified_rows(trained_hf_model):
    """After commit(a) the cache equals a fresh causal encoding of the prefix minus its last token."""
    model = as_dual(trained_hf_model, torch.float32)
    width = 5
    prefix = trained_hf_model.chain.sample_sequences(1, 9, seed=2)[0]
    model.reset()
    model.call("packed", prefix, prefix[:0], width)                  # first call: D_0 = ∅
    model.commit(1)
    prefix = torch.cat([prefix, torch.tensor([4])])
    draft = torch.tensor([11, 12, 13])
    model.call("packed", prefix, draft, width)
    model.commit(3)                                                   # accepted d1, d2 + correction
    prefix = torch.cat([prefix, draft[:2], torch.tensor([40])])
    assert model.cache_len == prefix.numel() - 1
    with torch.inference_mode():
        fresh = model.hf_model(input_ids=prefix[None, :-1], use_cache=True).cache
    for layer, ref in zip(model.kv_cache.layers, fresh.layers):
        assert layer.keys.shape == ref.keys.shape
        assert (layer.keys - ref.keys).abs().max() <= TOL
        assert (layer.values - ref.values).abs().max() <= TOL


def test_call_before_commit_is_refused(trained_hf_model):
    model = as_dual(trained_hf_model, torch.float32)
    prefix = torch.tensor([1, 2, 3])
    model.reset()
    model.call("verify", prefix, prefix[:0], 1)
    with pytest.raises(RuntimeError, match="before commit"):
        model.call("verify", prefix, prefix[:0], 1)


@pytest.mark.parametrize("bad", [-1, VOCAB, 10_000, 1.5, "3", True, None])
def test_mask_token_id_outside_vocabulary(random_hf_model, bad):
    with pytest.raises(ValueError, match=r"mask_token_id must be an int in \[0, 48\)"):
        DualModeLM(random_hf_model, mask_token_id=bad)


def test_not_a_model_is_a_type_error():
    with pytest.raises(TypeError, match="hf_model must be a transformers causal LM"):
        DualModeLM(object(), mask_token_id=MASK_ID)
