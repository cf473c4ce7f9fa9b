"""The one loader and key convention: ``spec_lib.load(kind, preset)`` and
``spec_lib.checkpoint_key(kind, preset)`` cover every model kind the notebooks use, give the
keys the per-kind code computes (so the committed results' keys), and refuse bad arguments
before anything is loaded or trained."""

from __future__ import annotations

import pytest
import torch

import spec_lib
from spec_lib.training import registry


def test_every_kind_has_a_key_equal_to_its_pipeline_key():
    from spec_lib.training.any_order import checkpoint_key as any_order_key
    from spec_lib.training.baseline_drafters import baseline_key
    from spec_lib.training.block_drafters import drafter_key
    from spec_lib.training.checkpoints import model_key
    from spec_lib.training.deer import D2A_PRESETS, deer_cache_key
    from spec_lib.training.feature_head_drafters import feature_heads_key
    from spec_lib.training.frozen_editor_drafters import editors_key
    from spec_lib.training.proposal_lora import lora_key

    expected = {"target": model_key("cpu"), "lora": lora_key("cpu"), "deer": deer_cache_key(D2A_PRESETS["cpu"]),
                "dedit": drafter_key("cpu"), "baselines": baseline_key("cpu"), "frozen_editors": editors_key("cpu"),
                "any_order": any_order_key("cpu", "smax16"), "feature_heads": feature_heads_key("cpu")}
    assert set(expected) == set(registry.KINDS)
    for kind, key in expected.items():
        options = {"name": "smax16"} if kind == "any_order" else {}
        assert spec_lib.checkpoint_key(kind, "cpu", **options) == key, kind
    assert spec_lib.checkpoint_key("target", "smoke") != spec_lib.checkpoint_key("target", "cpu")   # presets differ


@pytest.mark.parametrize("call, error, message", [
    (lambda: spec_lib.load("targte"), ValueError, r"kind must be one of \['target', 'lora'"),
    (lambda: spec_lib.load("target", "xl"), ValueError, r"preset must be one of \['smoke', 'cpu'\] for kind 'target'"),
    (lambda: spec_lib.load("deer", dtype=torch.float32), ValueError, "a name, not a torch.dtype"),
    (lambda: spec_lib.load("dedit", dtype="float64"), ValueError, r"dtype must be one of \['float32'\]"),
    (lambda: spec_lib.load("lora", adapter_path="x"), TypeError, r"kind 'lora' takes the options \[\]"),
    (lambda: spec_lib.load("any_order"), ValueError, r"name must be one of \['smax16', 'smax32'\]"),
    (lambda: spec_lib.checkpoint_key("target", checkpoint_path="x"), TypeError, "takes the options"),
])
def test_bad_arguments_are_refused_before_any_work(call, error, message, monkeypatch):
    from spec_lib.training import self_speculative

    def never(*args, **kwargs):
        raise AssertionError("trained or loaded before the arguments were checked")

    monkeypatch.setattr(self_speculative, "load_or_train", never)
    with pytest.raises(error, match=message):
        call()


def test_a_preset_loads_through_the_one_loader():
    """``load("target", "smoke")`` returns what the per-kind loader returns: the preset's model
    wrapped for decoding, in the dtype asked for, and its tokenizer."""
    model, tokenizer = spec_lib.load("target", "smoke", dtype="float64", progress=False)
    assert next(model.hf_model.parameters()).dtype == torch.float64
    assert tokenizer.mask_token_id == model.mask_token_id
    result = spec_lib.decode(model, tokenizer("def f(x):")["input_ids"], schedule="packed", width=4, max_new_tokens=8)
    assert result.tokens == spec_lib.decode(model, tokenizer("def f(x):")["input_ids"], schedule="ar", width=1,
                                            max_new_tokens=8).tokens
