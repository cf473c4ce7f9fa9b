"""Shared fixtures: tiny transformers models (random and briefly dual-mode trained), and the run
of every notebook at the smoke profile (``smoke_outputs``).

The smoke run is one ``python -m spec_lib.run --profile smoke`` subprocess (about 12 min on one
torch thread). It runs the notebooks one after another, not on ``--cluster local:2``: with three
processes on two cores, notebook 13's timing-chosen best blocks once gave its run-fitted cost model
a single row count (a NaN fit with a warning). When a session collects a test that needs it, the
subprocess starts right after collection, in the background, and those tests are moved to the end
of the session: the rest of the suite runs while the notebooks do, both on one torch thread until
the notebooks are done, and the smoke tests wait for the subprocess. Its output root is a temporary
folder, removed at the end.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from spec_lib.io import REPO_ROOT
from spec_lib.models import DualModeLM, build_qwen3
from spec_lib.toy import MarkovLM
from spec_lib.drafters.feature_block import build_feature_block_drafter
from spec_lib.training import baselines, block_edit, d2a, next_token
from spec_lib.training.dedit import DEditConfig, target_features
from spec_lib.training.loop import fit
from spec_lib.training.teacher import greedy_continuations
from spec_lib.training.self_speculative import fit_dual_mode

VOCAB = 48            # token ids 0..46 are text, 47 is MASK
MASK_ID = VOCAB - 1
DEDIT_WIDTH = 6        # the block of the test DEdit drafter (anchor + 5 masks)
SEP_ID = VOCAB - 2      # a chain token reused as SEP by the test drafters (tests only)

HEADS_WIDTH = 5             # Domino / DSpark block rows = drafted candidates (anchor = first prediction slot)
HEADS_PROMPT_LEN = 8
HEADS_CONFIG = baselines.BaselineConfig(dedit=DEditConfig(width=HEADS_WIDTH, gamma=2.0, n_anchors=8), gru_hidden=16,
                                        mlp_hidden=16, markov_rank=8)

SMOKE_TIMEOUT_S = 1500
_SMOKE: dict = {}      # the background smoke run: proc, out (output root), log (path)


def _needs_smoke(item) -> bool:
    return "smoke_outputs" in getattr(item, "fixturenames", ())


def _start_smoke_run() -> None:
    out = Path(tempfile.mkdtemp(prefix="spec-lib-smoke-"))
    log = out / "runner.log"
    # One thread each: two processes of 2 OpenMP threads on 2 cores spin against each other
    # (a fixture that trains in 1 min took 7 while the notebooks ran).
    # The notebooks share this checkout's cached fingerprint of the decoding core (runs/fingerprint/):
    # each records a code version, and the battery behind it runs once, not once per output root.
    env = {**os.environ, "SPEC_LIB_OUTPUT_ROOT": str(out), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "SPEC_LIB_FINGERPRINT_CACHE": str(REPO_ROOT / "runs" / "fingerprint")}
    _SMOKE["threads"] = torch.get_num_threads()
    torch.set_num_threads(1)
    with open(log, "wb") as handle:                      # the child keeps its own descriptor
        proc = subprocess.Popen([sys.executable, "-m", "spec_lib.run", "--profile", "smoke", "--no-progress"],
                                cwd=REPO_ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT)
    _SMOKE.update(proc=proc, out=out, log=log)


def pytest_collection_modifyitems(session, config, items):
    """Tests that read the smoke run go last (stable order otherwise)."""
    items.sort(key=_needs_smoke)


def pytest_collection_finish(session):
    """Start the smoke run in the background as soon as the session knows it needs one."""
    if not session.config.option.collectonly and any(_needs_smoke(i) for i in session.items):
        _start_smoke_run()


def pytest_sessionfinish(session, exitstatus):
    """Stop a smoke run still going (an interrupted session) and remove its output root."""
    proc = _SMOKE.get("proc")
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()
    if "out" in _SMOKE:
        shutil.rmtree(_SMOKE["out"], ignore_errors=True)


def _restore_threads() -> None:
    if "threads" in _SMOKE:
        torch.set_num_threads(_SMOKE.pop("threads"))


@pytest.fixture(autouse=True)
def _threads_back_when_the_smoke_run_ends():
    """Give this process its torch threads back once the background notebooks are done."""
    proc = _SMOKE.get("proc")
    if proc is not None and proc.poll() is not None:
        _restore_threads()
    yield


@pytest.fixture(scope="session")
def smoke_outputs():
    """The output root of the run of every notebook at the smoke profile (waits for it)."""
    if "proc" not in _SMOKE:                           # e.g. a plugin reordered or filtered late
        _start_smoke_run()
    proc = _SMOKE["proc"]
    try:
        proc.wait(timeout=SMOKE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    _restore_threads()
    log = _SMOKE["log"].read_text(errors="replace")
    assert proc.returncode == 0, f"the smoke run failed (exit {proc.returncode}):\n{log[-20000:]}"
    return _SMOKE["out"]


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


def _train(model, steps, make_batch, loss_fn, seed=0):
    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        loss, _ = loss_fn(model, make_batch())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


@pytest.fixture(scope="session")
def drafters(trained_hf_model):
    """A diffusion drafter (Stage I on chain samples) and a briefly trained AR drafter:
    both right often enough that multi-token acceptance runs, wrong often enough to reject."""
    chain = trained_hf_model.chain
    rows = chain.sample_sequences(512, 48, seed=21)
    gen = torch.Generator().manual_seed(0)
    dllm = build_qwen3(VOCAB, hidden_size=64, num_layers=2, num_heads=4, max_positions=256, seed=3)

    def stage1():
        pick = torch.randint(0, rows.shape[0], (16,), generator=gen)
        return d2a.continuation_batch(rows[pick, :16], rows[pick, 16:], stage=1, mask_token_id=MASK_ID,
                                      sep_token_id=SEP_ID, pad_token_id=MASK_ID, generator=gen, context=16,
                                      min_context=2, max_suffix=8, t_min=0.5, context_noise=0.0)

    _train(dllm, 150, stage1, d2a.diffusion_loss)
    ar = build_qwen3(VOCAB, hidden_size=32, num_layers=1, num_heads=4, max_positions=256, seed=4)
    _train(ar, 25, lambda: next_token.ar_batch(rows[torch.randint(0, rows.shape[0], (16,), generator=gen)]),
           lambda m, b: next_token.ar_loss(m, *b))
    return dllm, ar


def _dedit_batch(hf_model, layer_ids, sequences, prompt_len, generator, n_anchors=8, width=DEDIT_WIDTH):
    loss_mask = torch.zeros_like(sequences, dtype=torch.bool)
    loss_mask[:, prompt_len:] = True
    parts = block_edit.sample_anchors(sequences, loss_mask, n_anchors=n_anchors, width=width, mask_token_id=MASK_ID,
                                      generator=generator)
    return block_edit.AnchorBatch(target_features(hf_model, sequences, layer_ids), *parts)


@pytest.fixture(scope="session")
def trained_pair(trained_hf_model):
    """The trained tiny target and a DEdit drafter trained briefly on the target's own greedy
    continuations of chain prompts, as the pipeline trains on teacher answers (float64)."""
    target_hf = copy.deepcopy(trained_hf_model).double().eval()
    for p in target_hf.parameters():
        p.requires_grad_(False)
    network = build_feature_block_drafter(target_hf.config, num_layers=1, n_features=2, block_size=DEDIT_WIDTH,
                                          mask_token_id=MASK_ID, seed=0).double()
    prompts = torch.as_tensor(trained_hf_model.chain.sample_sequences(256, 8, seed=9), dtype=torch.long)
    data = torch.cat([prompts, greedy_continuations(target_hf, prompts, 32, batch=256, pad_token_id=0,
                                                    progress=False)], dim=1)
    gen = torch.Generator().manual_seed(0)
    weights = block_edit.position_weights(DEDIT_WIDTH, 2.0).double()
    embed, head = target_hf.get_input_embeddings(), target_hf.get_output_embeddings()
    layer_ids = network.config.target_layer_ids

    def make(step):
        rows = data[torch.randint(0, len(data), (16,), generator=gen)]
        return _dedit_batch(target_hf, layer_ids, rows, 8, gen)

    history = fit(network, make, lambda m, b: block_edit.dedit_loss(m, embed, head, b, weights), steps=150, lr=3e-3,
                  warmup=10, progress=False)
    network.eval()
    return target_hf, network, history


@pytest.fixture(scope="session")
def trained_heads(trained_hf_model):
    """The tiny trained target (float64) and Domino / DSpark trained briefly on its greedy
    continuations of chain prompts, from the same initial backbone (seed 002's baselines)."""
    target_hf = copy.deepcopy(trained_hf_model).double().eval()
    for p in target_hf.parameters():
        p.requires_grad_(False)
    initial = build_feature_block_drafter(target_hf.config, num_layers=1, n_features=2, block_size=HEADS_WIDTH,
                                          mask_token_id=MASK_ID, seed=0)
    prompts = torch.as_tensor(trained_hf_model.chain.sample_sequences(256, HEADS_PROMPT_LEN, seed=9), dtype=torch.long)
    answers = greedy_continuations(target_hf, prompts, 32, batch=256, pad_token_id=0, progress=False)
    layer_ids = list(initial.config.target_layer_ids)
    embed, head = target_hf.get_input_embeddings(), target_hf.get_output_embeddings()
    weights = baselines.shifted_weights(HEADS_WIDTH, 2.0).double()
    trained = {}
    for kind in ("domino", "dspark"):
        gen = torch.Generator().manual_seed(0)
        network = baselines._network(kind, HEADS_CONFIG, initial).double()

        def make(step, gen=gen, kind=kind):
            pick = torch.randint(0, len(prompts), (16,), generator=gen)
            batch = baselines.shifted_batch(HEADS_CONFIG, target_hf, layer_ids, prompts[pick], answers[pick], MASK_ID,
                                            gen, with_target=kind == "dspark")
            batch.lam = max(0.0, 1 - step / 50)
            return batch

        if kind == "domino":
            def loss(m, b):
                return baselines.domino_loss(m, embed, head, b, weights)
        else:
            def loss(m, b):
                return baselines.dspark_loss(m, embed, head, b, weights, ce_weight=0.1, l1_weight=0.9, conf_weight=1.0)

        history = fit(network, make, loss, steps=150, lr=3e-3, warmup=10, progress=False)
        trained[kind] = (network.eval(), history)
    return target_hf, trained, (prompts, answers, layer_ids)


def _synthetic_repetition_report(methods, slices=("code", "stdlib"), temperatures=(None,)) -> list[dict]:
    """A synthetic ``repetition_report`` metric (the committed cpu results predate it): every method
    2 tokens per fresh iteration (10 per slice) and 6 per repeated one (30), AR unsplit; outputs
    repeat 50%, the real text 5%."""
    rows = []
    for t in temperatures:
        for s in slices:
            for m in methods:
                ar = m == "ar"
                row = {"slice": s, "method": m, "responses": 4, "repetition": 0.5, "reference_repetition": 0.05,
                       "fresh_tokens_per_iteration": None if ar else 2.0, "fresh_iterations": None if ar else 10,
                       "repeated_tokens_per_iteration": None if ar else 6.0, "repeated_iterations": None if ar else 30}
                rows.append(row if t is None else {"temperature": t, **row})
    return rows


@pytest.fixture
def repetition_report():
    """The builder of a synthetic ``repetition_report`` metric, for the findings tests."""
    return _synthetic_repetition_report
