"""Bad input gets a ValueError naming the argument and the allowed values, before any
model call."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spec_lib import decode
from spec_lib.models import DualModeLM
from spec_lib.toy import MarkovLM

from .conftest import MASK_ID


class CountingModel(DualModeLM):
    """A DualModeLM that counts forward calls."""

    calls = 0

    def forward_rows(self, layout, keep_rows):
        CountingModel.calls += 1
        return super().forward_rows(layout, keep_rows)


GOOD = dict(schedule="packed", width=3, max_new_tokens=5)


@pytest.mark.parametrize("override,prompt,pattern", [
    ({"width": 0}, [1, 2], r"width must be an int >= 1"),
    ({"width": 2.5}, [1, 2], r"width must be an int >= 1"),
    ({"max_new_tokens": -1}, [1, 2], r"max_new_tokens must be an int >= 0"),
    ({"schedule": "tree"}, [1, 2], r"schedule must be one of \['ar', 'linear', 'quadratic', 'packed', 'deer', 'ar_draft'\]"),
    ({"temperature": -0.1}, [1, 2], r"temperature must be a finite number >= 0"),
    ({"temperature": float("nan")}, [1, 2], r"temperature must be a finite number >= 0"),
    ({"eos_token_id": 10_000}, [1, 2], r"eos_token_id must be None or an int in \[0, 48\)"),
    ({"seed": "x"}, [1, 2], r"seed must be None or an int"),
    ({"draft_top_k": 0}, [1, 2], r"draft_top_k must be None or an int >= 1"),
    ({"draft_top_p": 1.5}, [1, 2], r"draft_top_p must be None or a number in \(0, 1\]"),
    ({}, [], r"prompt_ids must not be empty"),
    ({}, [1.0, 2.0], r"prompt_ids must contain integer token ids"),
    ({}, torch.tensor([1.0, 2.0]), r"prompt_ids must contain integer token ids"),
    ({}, "hello", r"prompt_ids must be a sequence of integer token ids"),
    ({}, [1, 99], r"prompt_ids must be token ids in \[0, 48\)"),
    ({}, [[1, 2], [3, 4]], r"prompt_ids must contain integer token ids"),
    ({}, torch.ones(2, 3, dtype=torch.long), r"prompt_ids must be 1-D"),
    ({}, list(range(40)) * 7, r"longer than the model's position limit max_position_embeddings=256"),
    ({"max_new_tokens": 300}, [1, 2], r"max_new_tokens=300 .* exceeds the model's position limit 256"),
])
def test_bad_input_raises_before_any_model_call(random_hf_model, override, prompt, pattern):
    model = CountingModel(random_hf_model, MASK_ID)
    CountingModel.calls = 0
    with pytest.raises(ValueError, match=pattern):
        decode(model, prompt, **{**GOOD, **override})
    assert CountingModel.calls == 0


def test_numpy_and_tensor_prompts_are_accepted(random_hf_model):
    model = DualModeLM(random_hf_model, MASK_ID)
    a = decode(model, np.array([1, 2, 3]), **GOOD).tokens
    b = decode(model, torch.tensor([[1, 2, 3]]), **GOOD).tokens
    c = decode(model, (1, 2, 3), **GOOD).tokens
    assert a == b == c and len(a) == 5


def test_a_raw_transformers_model_gets_a_hint(random_hf_model):
    with pytest.raises(TypeError, match="wrap a transformers model: spec_lib.models.DualModeLM"):
        decode(random_hf_model, [1, 2], **GOOD)


def test_toy_prompt_shorter_than_its_order():
    with pytest.raises(ValueError, match="prompt_ids must have at least order=2 tokens"):
        decode(MarkovLM(4, order=2), [1], **GOOD)


@pytest.mark.parametrize("kwargs,pattern", [
    ({"vocab_size": 1}, "vocab_size must be an int >= 2"),
    ({"vocab_size": 4, "order": 0}, "order must be an int >= 1"),
    ({"vocab_size": 4, "draft_noise": 2.0}, r"draft_noise must be in \[0, 1\]"),
    ({"vocab_size": 4, "eos_token_id": 4}, r"eos_token_id must be None or an int in \[0, 4\)"),
])
def test_toy_model_arguments(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        MarkovLM(**kwargs)
