"""Corpus, slices and tokenizer (spec_lib.data), the dual-mode loss layout, training with the
checkpoint cache (spec_lib.train), loading real checkpoints (spec_lib.checkpoints) and the
experiment statistics (spec_lib.bench)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import torch

from spec_lib import masks
from spec_lib.studies import bench
from spec_lib.toy import MarkovLM
from spec_lib.training import data
from spec_lib.training.checkpoints import load_dual_mode, load_model
from spec_lib.training.dual_mode import make_dual_mode_batch
from spec_lib.training.self_speculative import ModelConfig, TrainConfig, checkpoint_key, load_or_train, train

TINY_MODEL = ModelConfig(vocab_size=300, hidden_size=32, num_layers=1, num_heads=2, max_positions=512)
TINY_TRAIN = TrainConfig(steps=4, batch_size=2, seq_len=64, width=7, widths=(3, 7), decay=4.0, max_files=3,
                         eval_every=2, eval_batches=1, distill_steps=2, distill_prompts=4, distill_new_tokens=8)


def test_stdlib_split_is_deterministic_and_disjoint():
    train_files, heldout = data.stdlib_files("train"), data.stdlib_files("heldout")
    assert train_files and heldout and not set(train_files) & set(heldout)
    assert data.stdlib_files("heldout") == heldout
    assert 0.05 < len(heldout) / (len(heldout) + len(train_files)) < 0.2
    with pytest.raises(ValueError, match="split must be 'train' or 'heldout'"):
        data.stdlib_files("test")


def test_package_slice_is_real_code_the_corpus_never_saw():
    """The packages slice: documented functions of pure-Python packages outside the corpus."""
    files = data.package_files()
    assert files and not set(files) & set(data.stdlib_files("train"))
    examples = data.eval_examples("packages", 40, seed=0)
    assert len(examples) == 40 and all(e.prompt.startswith("def ") and e.reference.strip() for e in examples)
    corpus = "\n".join(data.training_documents(math_share=0.0, copy_share=0.0))
    headers = [e.prompt.splitlines()[0] for e in examples]
    assert sum(h in corpus for h in headers) <= 2          # a header may coincide with a stdlib one; bodies do not
    assert not [e for e in examples if e.reference.count("\n") >= 3 and e.reference.strip() in corpus]
    assert data.eval_examples("code", 2)[0].reference.strip().startswith("for idx")   # canonical solution


def test_evaluation_slices():
    assert len(data.eval_slice("code")) == 164 and "def has_close_elements" in data.eval_slice("code", 5)[0]
    stdlib = data.eval_slice("stdlib", 8, seed=1)
    assert len(stdlib) == 8 and all(p.startswith("def ") and '"""' in p for p in stdlib)
    math = data.eval_slice("math", 5)
    assert all(p.startswith("Question: ") and p.endswith("Answer:") for p in math)
    train_questions = {p.question for p in data.math_problems(2000, seed=0)}
    assert not any(p[len("Question: "):-len("\nAnswer:")] in train_questions for p in data.eval_slice("math", 50))
    copy = data.copy_examples(data.stdlib_files("heldout"), 3, seed=0)
    assert copy and all(e.new in e.target() and e.old in e.snippet for e in copy)
    with pytest.raises(ValueError, match="slice must be one of"):
        data.eval_slice("poetry")


def test_math_problems_are_correct():
    import operator
    import re

    ops = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.floordiv}
    for problem in data.math_problems(200, seed=3):
        steps = re.findall(r"(\d+) ([-+*/]) (\d+) = (\d+)", problem.solution)
        assert steps, problem.solution
        for a, op, b, result in steps:                                        # every worked step
            assert ops[op](int(a), int(b)) == int(result)
        assert int(steps[-1][3]) == problem.answer and problem.text().endswith(f"#### {problem.answer}\n")


def test_tokenizer_has_special_tokens_and_round_trips():
    tokenizer = data.train_tokenizer(data.training_documents(max_files=3), vocab_size=300)
    assert [tokenizer.mask_token_id, tokenizer.eos_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id] == [0, 1, 2, 3]
    text = "def add(a, b):\n    return a + b  # ünïcode\n"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text


def test_training_blocks_are_laid_out_like_the_drafting_call():
    """An anchor block of a training row sees exactly what a decoding call's block sees."""
    gen = torch.Generator().manual_seed(0)
    seqs = torch.arange(40).reshape(1, 40) + 5
    batch = make_dual_mode_batch(seqs, width=4, n_blocks=1, mask_token_id=0, generator=gen, p_branch=0.0, p_full=1.0,
                                 decay=4.0)
    first = int(batch.block_positions[0, 0])                                   # n - 1
    visible = batch.block_mask[0, 0] == 0                                      # (5 block rows, 40 + 5 keys)
    assert visible[:, :40].sum(1).tolist() == [first] * 5                     # x_0 .. x_{n-2}
    assert visible[:, 40:].all()
    call = masks.build_layout("linear_draft", context=seqs[0, :first], last=seqs[0, first:first + 1],
                              draft=seqs[0, :0], width=4, mask_token_id=0, start=0)
    block_rows = call.visible()[first:]                                        # the call's block rows
    assert torch.equal(block_rows[:, :first], visible[:, :first]) and torch.equal(block_rows[:, first:], visible[:, 40:])
    assert torch.equal(call.position_ids[first:], batch.block_positions[0])
    assert batch.diffusion_weights[0, 1].item() == pytest.approx(1.0)         # the next token: weight 1
    assert batch.diffusion_weights[0, 2].item() == pytest.approx(np.exp(-1 / 4))


def test_two_pass_loss_equals_one_masked_pass():
    """The causal stream then the blocks over its cache give the loss of one forward over all
    rows with the layout predicate's mask (the definition)."""
    import torch.nn.functional as F

    from spec_lib.architectures import build_qwen3
    from spec_lib.training.dual_mode import dual_mode_loss

    model = build_qwen3(64, hidden_size=32, num_layers=2, seed=3, dtype=torch.float64)
    gen = torch.Generator().manual_seed(1)
    seqs = torch.randint(1, 64, (3, 30), generator=gen)
    batch = make_dual_mode_batch(seqs, width=5, n_blocks=3, mask_token_id=0, generator=gen, decay=4.0,
                                 dtype=torch.float64)
    with torch.no_grad():
        _, parts = dual_mode_loss(model, batch)
        length, rows = 30, batch.block_ids.shape[1]
        causal = masks.causal_visible(length)[None].expand(3, -1, -1)
        top = torch.cat([causal, torch.zeros(3, length, rows, dtype=torch.bool)], 2)
        full = torch.cat([top, batch.block_mask[:, 0] == 0], 1)                # (3, L + rows, L + rows)
        ids = torch.cat([batch.input_ids, batch.block_ids], 1)
        pos = torch.cat([torch.arange(length).expand(3, -1), batch.block_positions], 1)
        logits = model(input_ids=ids, position_ids=pos, attention_mask=masks.to_additive(full, torch.float64)[:, None]).logits
        ar = F.cross_entropy(logits[:, :length].reshape(-1, 64), batch.ar_labels.reshape(-1), ignore_index=-100)
        per_row = F.cross_entropy(logits[:, length:].reshape(-1, 64), batch.diffusion_labels.reshape(-1),
                                  ignore_index=-100, reduction="none")
        w = batch.diffusion_weights.reshape(-1)
        diffusion = (w * per_row).sum() / w.sum()
    assert parts["ar"] == pytest.approx(float(ar), rel=1e-6)                 # the loss is float32
    assert parts["diffusion"] == pytest.approx(float(diffusion), rel=1e-6)


def test_self_distillation_rows_train_only_the_drafter():
    gen = torch.Generator().manual_seed(2)
    seqs = torch.randint(1, 50, (4, 40), generator=gen)
    batch = make_dual_mode_batch(seqs, width=4, n_blocks=5, mask_token_id=0, generator=gen,
                                 min_cut=torch.tensor([1, 1, 25, 25]), ar_rows=torch.tensor([True, True, False, False]))
    assert (batch.ar_labels[2:] == -100).all() and (batch.ar_labels[:2, :-1] >= 0).all()
    cuts = batch.block_positions.reshape(4, 5, 5)[:, :, 0]                    # first block position (n or n-1)
    assert (cuts[2:] >= 24).all()                                              # blocks cut inside the generated part


def test_train_save_load_and_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPEC_LIB_ARTIFACTS", str(tmp_path))
    trained = load_or_train(TINY_MODEL, TINY_TRAIN, progress=False)
    assert trained.path == tmp_path / "models" / checkpoint_key(TINY_MODEL, TINY_TRAIN)
    assert set(trained.history["stage"]) == {"stage 1: dual-mode", "stage 2: self-distillation"}
    assert set(trained.history["split"]) == {"train", "heldout"}
    assert trained.stage1 is not None and trained.record["checkpoint_key"] == trained.path.name
    assert trained.hf_model.config.mask_token_id == trained.tokenizer.mask_token_id
    # A second call loads from the cache instead of training.
    monkeypatch.setattr("spec_lib.training.self_speculative.train", lambda *a, **k: pytest.fail("retrained a cached model"))
    again = load_or_train(TINY_MODEL, TINY_TRAIN, progress=False)
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        assert torch.equal(trained.hf_model(ids).logits, again.hf_model(ids).logits)
    model, tokenizer = load_dual_mode(trained.path)
    assert model.mask_token_id == tokenizer.mask_token_id == 0
    assert again.stage1 is not None


def test_load_dual_mode_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_dual_mode(tmp_path / "nope")
    from spec_lib.architectures import build_qwen3

    build_qwen3(32, hidden_size=16, num_layers=1).save_pretrained(tmp_path / "plain")
    with pytest.raises(ValueError, match="no MASK token id"):
        load_dual_mode(tmp_path / "plain")
    model, _ = load_dual_mode(tmp_path / "plain", mask_token_id=31)
    assert model.mask_token_id == 31
    with pytest.raises(ValueError, match="mask_token_id must be None or an int token id, got 31.0"):
        load_dual_mode(tmp_path / "plain", mask_token_id=31.0)
    with pytest.raises(ValueError, match="dtype must be one of"):
        load_dual_mode(tmp_path / "plain", mask_token_id=31, dtype="float8")
    with pytest.raises(ValueError, match="model_preset must be one of"):
        load_model("huge")


def test_paired_bootstrap_and_identity():
    toy = MarkovLM(6, seed=0, draft_noise=0.3, eos_token_id=5, concentration=0.3)
    prompts = {"a": [[1, 2], [3, 4], [0, 1], [2, 2]], "b": [[4, 4], [3, 1]]}
    methods = [bench.Method("ar", 1), bench.Method("linear", 7), bench.Method("packed", 7)]
    runs = bench.run_grid(toy, prompts, methods, max_new_tokens={"a": 20, "b": 10}, eos_token_id=5, progress=False)
    assert len(runs) == 3 * 6
    identity = bench.identity_to_reference(runs)
    assert (identity["identical"] == identity["responses"]).all()
    assert bench.divergences(None, runs, prompts).empty
    agg = bench.aggregate(runs).set_index(["slice", "method"])
    ratios = bench.paired_bootstrap(runs, "linear B=8", n_resamples=500, seed=0).set_index(["slice", "method"])
    for slice_ in ("a", "b"):
        point = agg.loc[(slice_, "packed B=8"), "tokens_per_nfe"] / agg.loc[(slice_, "linear B=8"), "tokens_per_nfe"]
        row = ratios.loc[(slice_, "packed B=8")]
        assert row["tokens_per_nfe_ratio"] == pytest.approx(point)
        assert row["tokens_per_nfe_ratio_low"] <= point <= row["tokens_per_nfe_ratio_high"]
    costs = bench.call_costs(runs)
    assert len(costs) == runs["nfe"].sum()
    assert (costs.groupby((costs["call"] == 0).cumsum()).size() == runs["nfe"].to_numpy()).all()
    check = bench.cost_model_check(runs, "packed B=8", "linear B=8")
    assert np.isfinite(check["predicted_throughput_ratio"]) and check["observed_throughput_ratio"] > 0
    # With an independent calibration (tau only) the prediction is tokens ratio x time-per-NFE ratio.
    fixed = bench.cost_model_check(runs, "packed B=8", "linear B=8", calibration={"tau": 1e-3, "delta": 0.0})
    both = bench.aggregate(runs, by=("method",)).set_index("method")
    per_nfe = {m: 1e-3 + (both.loc[m, "wall"] - both.loc[m, "model"]) / both.loc[m, "nfe"]
               for m in ("packed B=8", "linear B=8")}
    expected = (both.loc["packed B=8", "tokens_per_nfe"] / both.loc["linear B=8", "tokens_per_nfe"]
                * per_nfe["linear B=8"] / per_nfe["packed B=8"])
    assert fixed["predicted_throughput_ratio"] == pytest.approx(expected)
    assert fixed["calibration"] == "independent calibration"
    assert fixed["within_5_percent"] == (abs(fixed["relative_error"]) <= 0.05)
    # Own calls of a single row count cannot separate tau from delta: no fit, said so, no warning.
    one = runs[runs["method"] == "packed B=8"].copy()
    one["rows_per_call"] = [[8] * len(r) for r in one["rows_per_call"]]
    twin = one.assign(method="linear B=8")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        flat = bench.cost_model_check(pd.concat([one, twin]), "packed B=8", "linear B=8")
    assert np.isnan(flat["predicted_throughput_ratio"]) and "no fit" in flat["calibration"]
    assert not flat["within_5_percent"]


def test_drafter_accuracy_on_exact_marginals():
    toy = MarkovLM(5, seed=1, concentration=0.05)                                  # nearly deterministic
    table = bench.drafter_accuracy(toy, [[0], [1], [2], [3]], 4)
    assert list(table["offset"]) == [1, 2, 3, 4]
    assert table["accuracy"].iloc[0] == 1.0                                        # exact 1-step marginal
    assert (np.diff(table["all_correct_up_to"]) <= 0).all()


def test_training_is_deterministic():
    config = TrainConfig(steps=3, batch_size=2, seq_len=48, width=3, max_files=2, eval_every=3, eval_batches=1)
    first, second = train(TINY_MODEL, config, progress=False), train(TINY_MODEL, config, progress=False)
    assert first.history.drop(columns="seconds").equals(second.history.drop(columns="seconds"))
    for a, b in zip(first.hf_model.parameters(), second.hf_model.parameters()):
        assert torch.equal(a, b)
