"""The any-order model's training construction (spec_lib.training.any_order: SetDLM's staggered
orders, token / verifier-mask / draft-mask streams) and the notebook 15 study helpers
(answer scoring, paired accuracy, LTR labels)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from spec_lib.architectures import build_qwen3
from spec_lib.studies import any_order as ao
from spec_lib.training import data
from spec_lib.training.any_order import (AnyOrderConfig, any_order_loss, chunk_starts, make_batch, preset,
                                         sample_order, staggered_order, three_stream_visible)


@pytest.mark.parametrize("length, budget", [(64, 4), (100, 8), (128, 16)])
def test_staggered_order_is_a_local_shuffle_of_horizon_2s(length, budget):
    gen = torch.Generator().manual_seed(0)
    shuffled = 0
    for _ in range(50):
        perm = staggered_order(length, budget, gen)
        assert sorted(perm.tolist()) == list(range(length))
        rank = torch.empty(length, dtype=torch.long)
        rank[perm] = torch.arange(length)
        # position i is generated after j > i only if j - i < 2S (it can be overtaken only by the next 2S - 1)
        later = (rank[None, :] < rank[:, None]) & (torch.arange(length)[None, :] > torch.arange(length)[:, None])
        gaps = (torch.arange(length)[None, :] - torch.arange(length)[:, None])[later]
        assert gaps.numel() == 0 or int(gaps.max()) < 2 * budget
        shuffled += int(not torch.equal(perm, torch.arange(length)))
    assert shuffled > 40                                              # not the identity


def test_three_streams_follow_setdlm_rules():
    rank = torch.tensor([0, 1, 3, 2, 4])                              # positions 2 and 3 swapped
    starts = torch.tensor([0, 1, 2, 2, 4])                            # chunk {rank 2, rank 3}
    vis = three_stream_visible(rank, starts)
    n = 5
    token, verify, draft = vis[:n, :n], vis[n: 2 * n, :n], vis[2 * n:, :n]
    assert torch.equal(token, rank[None, :] <= rank[:, None])         # causal in the generation order
    assert torch.equal(verify, rank[None, :] < rank[:, None])         # strictly earlier tokens
    assert not verify.diagonal().any()                                # never its own token
    assert draft[2].tolist() == [True, True, False, False, False]     # before its chunk only
    assert draft[3].tolist() == [True, True, False, False, False]
    assert torch.equal(vis[n:, n:], torch.eye(2 * n, dtype=torch.bool))   # masks see only themselves
    assert not vis[:n, n:].any()                                      # tokens never see masks


def test_batch_and_loss():
    config = preset("smoke", "smax16")
    gen = torch.Generator().manual_seed(0)
    windows = torch.randint(4, 200, (3, 16), generator=gen)
    ids, positions, mask, targets = make_batch(windows, torch.tensor([3, 5, 1]), config, mask_token_id=0,
                                               generator=gen)
    assert ids.shape == (3, 48) and positions.shape == (3, 48) and mask.shape == (3, 1, 48, 48)
    assert (ids[:, 16:] == 0).all() and torch.equal(ids[:, :16], windows)
    assert (targets[:, :16] == -100).all()                            # token rows carry no loss
    assert (targets[0, 16:19] == -100).all() and (targets[0, 19:32] == windows[0, 3:]).all()   # the prompt is given
    model = build_qwen3(256, hidden_size=32, num_layers=1, num_heads=2)
    loss, parts = any_order_loss(model, (ids, positions, mask, targets), 0)
    assert torch.isfinite(loss) and set(parts) == {"verify_ce", "draft_ce"}


def test_order_starts_with_the_prompt_and_chunks_cover_the_response():
    gen = torch.Generator().manual_seed(1)
    config = AnyOrderConfig(max_chunk=3)
    for prompt in range(1, 21):
        rank = sample_order(32, prompt, config, gen)
        assert rank[:prompt].tolist() == list(range(prompt))
        starts = chunk_starts(rank, prompt, 3, gen)
        response = starts[rank >= prompt]
        assert (rank[rank >= prompt] - response < 3).all() and (response >= prompt).all()


def test_bad_preset():
    with pytest.raises(ValueError, match="profile must be one of"):
        preset("tpu", "smax16")
    with pytest.raises(ValueError, match="preset must be one of"):
        preset("cpu", "smax64")


# ----- notebook 15 helpers ---------------------------------------------------------------------------

def test_answer_parsing():
    assert ao.answer_of(" 3 + 4 = 7. #### 7\nQuestion") == 7
    assert ao.answer_of("no answer here") is None
    assert ao.answer_of("#### -12") == -12


def test_paired_accuracy_and_labels():
    rows = []
    for prompt in range(40):
        for method in ("packed/ltr", "linear/ltr", "quadratic/ltr", "packed/confidence"):
            correct = prompt % 2 == 0 if method != "packed/confidence" else prompt % 4 == 0
            rows.append({"slice": "s", "prompt": prompt, "method": method, "correct": correct, "output": (prompt,)})
    runs = pd.DataFrame(rows)
    pairs = ao.paired_accuracy(runs, "packed/ltr", n_resamples=2000).set_index("method")
    assert pairs.loc["linear/ltr", "diff_pp"] == 0
    assert pairs.loc["packed/confidence", "diff_pp"] == pytest.approx(-25.0)
    assert pairs.loc["packed/confidence", "low_pp"] < -25 < pairs.loc["packed/confidence", "high_pp"] < 0
    labels = ao.ltr_labels(runs)
    assert labels["identical_labels"].item() and labels["prompts_with_different_outputs"].item() == 0
    runs.loc[(runs["prompt"] == 3) & (runs["method"] == "linear/ltr"), "correct"] = True
    assert not ao.ltr_labels(runs)["identical_labels"].item()


def test_problems_keep_the_templates_with_small_operands():
    """The operand stand-in changes only the operands: with operand_max = 9 every number in a question
    is at most 9 * 9 (kind 3 shares a product), and with None the math slice's problems come back."""
    import re

    from spec_lib.training.any_order import problems

    small = problems(200, 0, 9)
    assert all(int(x) <= 81 for p in small for x in re.findall(r"\d+", p.question))
    assert max(int(x) for p in small for x in re.findall(r"\d+", p.question)) > 9     # products appear
    assert [p.text() for p in problems(5, 7, None)] == [p.text() for p in data.math_problems(5, seed=7)]


def test_windows_start_at_problems_with_their_prompts():
    from spec_lib.training.any_order import corpus

    tokenizer, train, _ = corpus(AnyOrderConfig(train_problems=64))
    ids, prompts = train.windows(48, 8, torch.Generator().manual_seed(0))
    for row, prompt in zip(ids, prompts.tolist()):
        text = tokenizer.decode(row.tolist())
        assert text.startswith("Question:") and tokenizer.decode(row[:prompt].tolist()).endswith("Answer:")


def test_stop_marker_is_several_tokens():
    from spec_lib.training.any_order import corpus

    tokenizer, _, _ = corpus(AnyOrderConfig(train_problems=200))
    marker = ao.stop_marker(tokenizer)
    assert len(marker) >= 2
    text = "".join(p.text() for p in data.math_problems(3, seed=1))
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert any(ids[i: i + len(marker)] == marker for i in range(len(ids)))   # as it appears in running text
