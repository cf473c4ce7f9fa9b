"""Bad input gets a ValueError naming the argument and the allowed values, before any model
call, from both entry points (``decode`` and ``decode_batch`` share one validation); and the
probes of a careful user: concurrent decodes, a model left in train mode, huge sizes."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from spec_lib import decode, decode_batch
from spec_lib.models import DualModeLM
from spec_lib.schedules.validation import MAX_NEW_TOKENS, MAX_WIDTH
from spec_lib.toy import MarkovLM

from .conftest import MASK_ID, as_dual, prompts


class CountingModel(DualModeLM):
    """A DualModeLM that counts forward calls."""

    calls = 0

    def forward_rows(self, layout, keep_rows):
        CountingModel.calls += 1
        return super().forward_rows(layout, keep_rows)


GOOD = dict(schedule="packed", width=3, max_new_tokens=5)

BAD = [
    ({"width": 0}, [1, 2], r"width must be an int in \[1, 1024\]"),
    ({"width": 2.5}, [1, 2], r"width must be an int in \[1, 1024\]"),
    ({"width": 10 ** 6}, [1, 2], r"width must be an int in \[1, 1024\]"),
    ({"width": True}, [1, 2], r"width must be an int in \[1, 1024\]"),
    ({"schedule": "quadratic", "width": 200}, [1, 2], r"width=200 gives 40602 rows per call for schedule 'quadratic'"),
    ({"max_new_tokens": -1}, [1, 2], r"max_new_tokens must be an int >= 0"),
    ({"schedule": "tree"}, [1, 2], r"schedule must be one of \['ar', 'linear', 'quadratic', 'packed', 'partial', 'drafted', 'ar_draft', 'native', 'deer'\]"),
    ({"schedule": ["ar"]}, [1, 2], r"schedule must be one of"),
    ({"temperature": -0.1}, [1, 2], r"temperature must be a finite number >= 0"),
    ({"temperature": float("nan")}, [1, 2], r"temperature must be a finite number >= 0"),
    ({"eos_token_id": 10_000}, [1, 2], r"eos_token_id must be None or an int in \[0, 48\)"),
    ({"eos_token_id": 3.0}, [1, 2], r"eos_token_id must be None or an int in \[0, 48\)"),
    ({"seed": "x"}, [1, 2], r"seed must be None or an int in \[0, 2\*\*64\)"),
    ({"seed": 2 ** 64}, [1, 2], r"seed must be None or an int in \[0, 2\*\*64\)"),
    ({"seed": -1}, [1, 2], r"seed must be None or an int in \[0, 2\*\*64\)"),
    ({"draft_top_k": 0}, [1, 2], r"draft_top_k must be None or an int >= 1"),
    ({"draft_top_p": 1.5}, [1, 2], r"draft_top_p must be None or a number in \(0, 1\]"),
    ({"ablation": "oops"}, [1, 2], r"ablation must be one of"),
    ({}, [], r"prompt_ids must not be empty"),
    ({}, [1.0, 2.0], r"prompt_ids must contain integer token ids"),
    ({}, np.array([1.0, 2.0]), r"prompt_ids must contain integer token ids"),
    ({}, [True, False], r"prompt_ids must contain integer token ids"),
    ({}, torch.tensor([1.0, 2.0]), r"prompt_ids must contain integer token ids"),
    ({}, "hello", r"prompt_ids must be a sequence of integer token ids"),
    ({}, {1: "a", 2: "b"}, r"prompt_ids must be an ordered sequence of integer token ids, got dict"),
    ({}, {1, 2}, r"prompt_ids must be an ordered sequence of integer token ids, got set"),
    ({}, 7, r"prompt_ids must be a sequence of integer token ids, got int"),
    ({}, [1, 99], r"prompt_ids must be token ids in \[0, 48\)"),
    ({}, [[1, 2], [3, 4]], r"prompt_ids must be 1-D \(or of shape \(1, n\)\), got shape \(2, 2\)"),
    ({}, [[1, 2], [3]], r"prompt_ids must contain integer token ids"),
    ({}, torch.ones(2, 3, dtype=torch.long), r"prompt_ids must be 1-D"),
    ({}, list(range(40)) * 7, r"longer than the model's position limit max_position_embeddings=256"),
    ({"max_new_tokens": 300}, [1, 2], r"max_new_tokens=300 .* exceeds the model's position limit 256"),
    # Drafts sit W positions past the prefix: a decode that would fit AR still fails here.
    ({"max_new_tokens": 254}, [1, 2], r"places draft rows up to 3 positions past the prefix\); allowed: max_new_tokens <= 252"),
]


@pytest.mark.parametrize("override,prompt,pattern", BAD)
def test_bad_input_raises_before_any_model_call(random_hf_model, override, prompt, pattern):
    model = CountingModel(random_hf_model, MASK_ID)
    CountingModel.calls = 0
    with pytest.raises(ValueError, match=pattern):
        decode(model, prompt, **{**GOOD, **override})
    assert CountingModel.calls == 0


@pytest.mark.parametrize("override,prompt,pattern", [
    ({"width": 10 ** 6}, [1, 2], r"width must be an int in \[1, 1024\]"),
    ({"max_new_tokens": -1}, [1, 2], r"max_new_tokens must be an int >= 0"),
    ({"eos_token_id": 10_000}, [1, 2], r"eos_token_id must be None or an int in \[0, 48\)"),
    ({"eos_token_id": 3.0}, [1, 2], r"eos_token_id must be None or an int in \[0, 48\)"),
    ({}, [1.0, 2.0], r"prompts\[i\] must contain integer token ids"),
    ({}, {1: "a"}, r"prompts\[i\] must be an ordered sequence"),
    ({}, [1, 99], r"prompts\[i\] must be token ids in \[0, 48\)"),
    ({}, list(range(40)) * 7, r"longer than the model's position limit max_position_embeddings=256"),
    ({"max_new_tokens": 300}, [1, 2], r"max_new_tokens=300 .* exceeds the model's position limit 256"),
    ({"schedule": "packed"}, [1, 2], r"decode_batch runs the schedules \['ar', 'drafted'\] \(alias 'deer'\)"),
    ({"schedule": "deer"}, [1, 2], r"schedule 'deer' needs drafter"),
])
def test_decode_batch_validates_the_same_way(random_hf_model, override, prompt, pattern):
    model = CountingModel(random_hf_model, MASK_ID)
    CountingModel.calls = 0
    with pytest.raises(ValueError, match=pattern):
        decode_batch(model, [[1, 2], prompt], **{**GOOD, "schedule": "ar", **override})
    assert CountingModel.calls == 0


def test_decode_batch_accepts_what_decode_accepts(random_hf_model):
    model = DualModeLM(random_hf_model, MASK_ID)
    results = decode_batch(model, [[1, 2, 3], np.array([4, 5])], schedule="ar", width=np.int64(3),
                           max_new_tokens=0, eos_token_id=np.int32(5))
    assert [r.tokens for r in results] == [[], []] and results[0].extras["batch"]["tokens"] == 0
    assert [r.nfe for r in results] == [0, 0]
    results = decode_batch(model, [torch.tensor([[1, 2, 3]])], schedule="ar", width=1, max_new_tokens=4)
    single = decode(model, [1, 2, 3], schedule="ar", width=1, max_new_tokens=4)
    assert (results[0].tokens, results[0].nfe) == (single.tokens, single.nfe)
    with pytest.raises(ValueError, match="prompts must be a non-empty list"):
        decode_batch(model, [], schedule="ar", width=1, max_new_tokens=4)


def test_numpy_list_and_tensor_prompts_are_accepted_alike(random_hf_model):
    model = DualModeLM(random_hf_model, MASK_ID)
    outputs = [decode(model, p, **GOOD).tokens for p in
               (np.array([1, 2, 3]), torch.tensor([[1, 2, 3]]), (1, 2, 3), [[1, 2, 3]], [np.int64(1), 2, 3])]
    assert all(o == outputs[0] for o in outputs) and len(outputs[0]) == 5
    assert decode(model, [1, 2, 3], **{**GOOD, "width": np.int32(3), "seed": 2 ** 64 - 1, "temperature": 1}).tokens


def test_a_raw_transformers_model_gets_a_hint(random_hf_model):
    with pytest.raises(TypeError, match="wrap a transformers model: spec_lib.models.DualModeLM"):
        decode(random_hf_model, [1, 2], **GOOD)


def test_toy_limits_without_a_position_limit():
    toy = MarkovLM(4)
    with pytest.raises(ValueError, match=f"max_new_tokens must be an int >= 0 <= {MAX_NEW_TOKENS}"):
        decode(toy, [1], schedule="ar", width=1, max_new_tokens=10 ** 12)
    with pytest.raises(ValueError, match=f"width must be an int in \\[1, {MAX_WIDTH}\\]"):
        decode(toy, [1], schedule="packed", width=10 ** 6, max_new_tokens=3)
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


def test_concurrent_decodes_on_one_model_are_correct(trained_hf_model):
    """Decode state is per thread: two threads sharing one DualModeLM get serial outputs."""
    model = as_dual(trained_hf_model, torch.float64)
    items = prompts(8, seed=70, chain=trained_hf_model.chain)
    expected = {(i, s): decode(model, p, schedule=s, width=5, max_new_tokens=20).tokens
                for i, p in enumerate(items) for s in ("packed", "linear")}
    got, errors = {}, []

    def worker(schedule):
        try:
            for _ in range(2):
                for i, p in enumerate(items):
                    got[(i, schedule)] = decode(model, p, schedule=schedule, width=5, max_new_tokens=20).tokens
        except Exception as err:                                   # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(s,)) for s in ("packed", "linear")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and got == expected


def test_a_model_put_back_in_train_mode_decodes_in_eval_mode(trained_hf_model):
    """Dropout on: every decode still switches the model to eval, so outputs are deterministic."""
    model = as_dual(trained_hf_model, torch.float64)
    model.hf_model.config.attention_dropout = 0.5
    for module in model.hf_model.modules():
        if hasattr(module, "attention_dropout"):
            module.attention_dropout = 0.5
    reference = decode(model, [1, 2, 3], schedule="packed", width=4, max_new_tokens=16).tokens
    for _ in range(3):
        model.hf_model.train()
        assert decode(model, [1, 2, 3], schedule="packed", width=4, max_new_tokens=16).tokens == reference
        assert not model.hf_model.training
