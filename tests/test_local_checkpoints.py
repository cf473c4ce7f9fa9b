"""Real checkpoints from local directories (checkpoints the tests save themselves): a model
whose directory ships its own modelling code loads only with trust_remote_code=True, missing
weights are named, and the drafter loader returns working drafters of both kinds."""

from __future__ import annotations

import json

import pytest
import torch

import spec_lib
from spec_lib.architectures import build_qwen3
from spec_lib.drafters import ARDrafter, DiffusionDrafter
from spec_lib.training.checkpoints import load_drafter, load_dual_mode

CUSTOM_CODE = '''
from transformers import Qwen3Config, Qwen3ForCausalLM


class SpecTestConfig(Qwen3Config):
    model_type = "spec-test-qwen3"


class SpecTestLM(Qwen3ForCausalLM):
    config_class = SpecTestConfig
'''


@pytest.fixture
def custom_code_checkpoint(tmp_path):
    """A Qwen3 checkpoint rewritten as a custom architecture with its code beside it."""
    path = tmp_path / "custom"
    build_qwen3(32, hidden_size=16, num_layers=1, seed=1).save_pretrained(path)
    (path / "modeling_spec_test.py").write_text(CUSTOM_CODE)
    config = json.loads((path / "config.json").read_text())
    config.update(model_type="spec-test-qwen3", architectures=["SpecTestLM"], mask_token_id=31,
                  auto_map={"AutoConfig": "modeling_spec_test.SpecTestConfig",
                            "AutoModelForCausalLM": "modeling_spec_test.SpecTestLM"})
    (path / "config.json").write_text(json.dumps(config))
    return path


def test_custom_code_needs_the_explicit_opt_in(custom_code_checkpoint):
    with pytest.raises(ValueError, match="ships its own modelling code.*trust_remote_code=True"):
        load_dual_mode(custom_code_checkpoint)
    with pytest.raises(TypeError, match="trust_remote_code must be True or False"):
        load_dual_mode(custom_code_checkpoint, trust_remote_code="yes")
    with pytest.warns(UserWarning, match="not among the tested types"):
        model, _ = load_dual_mode(custom_code_checkpoint, trust_remote_code=True)
    assert type(model.hf_model).__name__ == "SpecTestLM" and model.mask_token_id == 31
    ar = spec_lib.decode(model, [1, 2, 3], schedule="ar", width=1, max_new_tokens=8)
    packed = spec_lib.decode(model, [1, 2, 3], schedule="packed", width=3, max_new_tokens=8)
    assert packed.tokens == ar.tokens


def test_missing_weights_are_named(tmp_path):
    build_qwen3(32, hidden_size=16, num_layers=1).save_pretrained(tmp_path / "m")
    (tmp_path / "m" / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="config.json but no weights: expected one of"):
        load_dual_mode(tmp_path / "m", mask_token_id=31)


def test_drafter_loader(tmp_path):
    build_qwen3(32, hidden_size=16, num_layers=1, seed=2).save_pretrained(tmp_path / "d")
    target = spec_lib.models.DualModeLM(build_qwen3(32, hidden_size=16, num_layers=1, seed=3), 31)
    ar_drafter = load_drafter(tmp_path / "d", "ar")
    assert isinstance(ar_drafter, ARDrafter)
    with pytest.raises(ValueError, match="no MASK token id for the diffusion drafter"):
        load_drafter(tmp_path / "d", "diffusion")
    diffusion = load_drafter(tmp_path / "d", "diffusion", mask_token_id=31, sep_token_id=30, context=16)
    assert isinstance(diffusion, DiffusionDrafter)
    reference = spec_lib.decode(target, [1, 2, 3], schedule="ar", width=1, max_new_tokens=10).tokens
    for schedule, drafter in (("ar_draft", ar_drafter), ("deer", diffusion)):
        res = spec_lib.decode(target, [1, 2, 3], schedule=schedule, width=4, max_new_tokens=10, drafter=drafter)
        assert res.tokens == reference, schedule
    with pytest.raises(ValueError, match="kind must be 'diffusion' or 'ar'"):
        load_drafter(tmp_path / "d", "quadratic")
    with pytest.raises(FileNotFoundError, match=r"drafter path .* \(no config.json\)"):
        load_drafter(tmp_path / "nowhere", "ar")
