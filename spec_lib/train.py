"""Training the self-speculative (AR + diffusion) model, with a checkpoint cache.

Reference: seed 000, Sec. 2.2 (one network with AR and diffusion modes, trained jointly on
both objectives, as Nemotron-Labs-Diffusion and TiDAR are); the loss and its layout are in
:mod:`spec_lib.losses`, the data in :mod:`spec_lib.data`.

:func:`load_or_train` returns a model for a (:class:`ModelConfig`, :class:`TrainConfig`)
pair: from ``artifacts/models/<key>/`` when a checkpoint with the same configuration, data
fingerprint and training-code version exists (``from_pretrained``), else it trains one and
saves it there (``save_pretrained``, tokenizer and loss history included).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from . import data
from .losses import dual_mode_loss, make_dual_mode_batch
from .results import PACKAGE_DIR, atomic_directory, output_root

TRAINING_CODE = ("data.py", "losses.py", "train.py", "masks.py")   # what the cache key hashes


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of the shared-weight model (a Qwen3 config built offline)."""

    vocab_size: int = 4096
    hidden_size: int = 256
    num_layers: int = 4
    num_heads: int = 4
    max_positions: int = 2048


@dataclass(frozen=True)
class TrainConfig:
    """Dual-mode training: data, optimisation and the drafting blocks of the diffusion loss."""

    steps: int = 500
    batch_size: int = 16
    seq_len: int = 256
    width: int = 31                # largest drafting width W (blocks of B = W + 1 rows)
    widths: tuple[int, ...] = ()   # widths sampled per step (default: just ``width``)
    n_blocks: int = 2              # drafting blocks appended per training row
    p_full: float = 0.5            # share of fully masked blocks (the drafting case)
    p_branch: float = 0.25         # share of anchor-free blocks (Quadratic-SS branches)
    diffusion_weight: float = 1.0
    decay: float | None = None     # diffusion CE weight exp(-(k-1)/decay) at offset k
    distill_steps: int = 0         # stage 2: steps on the model's own greedy continuations
    distill_prompts: int = 256     # corpus windows continued greedily for stage 2
    distill_new_tokens: int = 128  # tokens generated per stage-2 prompt
    distill_mix: float = 0.5       # share of stage-2 rows from self-generated text
    lr: float = 3e-3
    warmup: int = 30
    bf16: bool = False             # torch.autocast("cpu", bfloat16)
    seed: int = 0
    math_share: float = 0.1        # synthetic math text, as a share of the stdlib characters
    copy_share: float = 0.05       # copy-with-one-change examples, same
    max_files: int | None = None   # use only the first files of the corpus (smoke)
    eval_every: int = 50           # held-out loss every so many steps
    eval_batches: int = 4


@dataclass
class Trained:
    """A trained (or loaded) model with its tokenizer and training record."""

    hf_model: object
    tokenizer: object
    history: pd.DataFrame
    record: dict = field(default_factory=dict)
    path: Path | None = None

    @property
    def mask_token_id(self) -> int:
        return int(self.tokenizer.mask_token_id)


def artifacts_dir() -> Path:
    """Where checkpoints are cached: ``SPEC_LIB_ARTIFACTS`` or ``<output root>/artifacts``."""
    return Path(os.environ.get("SPEC_LIB_ARTIFACTS", output_root() / "artifacts")).resolve()


def training_code_version(files: tuple[str, ...] = TRAINING_CODE) -> str:
    """Hash of the library files a checkpoint depends on (part of its cache key)."""
    digest = hashlib.sha256()
    for name in files:
        digest.update((PACKAGE_DIR / name).read_bytes())
    return digest.hexdigest()[:12]


def data_fingerprint(config: TrainConfig) -> dict:
    """What the corpus depends on: the Python version and the stdlib files used (and sizes)."""
    files = data.stdlib_files("train")[: config.max_files]
    listing = hashlib.sha256("".join(f"{p.name}:{p.stat().st_size};" for p in files).encode()).hexdigest()[:12]
    return {"python": data.python_version(), "files": len(files), "listing": listing}


def cache_key(model_config: ModelConfig, train_config: TrainConfig) -> str:
    blob = json.dumps({"model": asdict(model_config), "train": asdict(train_config),
                       "data": data_fingerprint(train_config), "code": training_code_version()}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def build_model(config: ModelConfig, seed: int):
    from .models import build_qwen3

    return build_qwen3(config.vocab_size, hidden_size=config.hidden_size, num_layers=config.num_layers,
                       num_heads=config.num_heads, max_positions=config.max_positions, seed=seed)


def prepare_corpus(train_config: TrainConfig, vocab_size: int):
    """Tokenizer trained on the training documents; train and held-out token streams."""
    docs = data.training_documents(train_config.math_share, train_config.copy_share, train_config.seed,
                                   max_files=train_config.max_files)
    tokenizer = data.train_tokenizer(docs, vocab_size)
    heldout_docs = [data.read_source(p) for p in data.stdlib_files("heldout")[: train_config.max_files]]
    heldout_docs += [p.text() for p in data.math_problems(200, seed=10_000 + train_config.seed)]
    return tokenizer, data.token_stream(docs, tokenizer), data.token_stream(heldout_docs, tokenizer)


def windows(stream: np.ndarray, seq_len: int, count: int, generator: torch.Generator) -> torch.Tensor:
    """``(count, seq_len)`` random windows of a token stream."""
    starts = torch.randint(0, len(stream) - seq_len, (count,), generator=generator).numpy()
    return torch.from_numpy(np.stack([stream[s: s + seq_len] for s in starts]).astype(np.int64))


@torch.no_grad()
def heldout_loss(hf_model, batches, autocast: bool) -> dict[str, float]:
    """Mean AR and diffusion CE over fixed held-out batches."""
    was_training = hf_model.training
    hf_model.eval()
    parts = []
    for batch in batches:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            parts.append(dual_mode_loss(hf_model, batch)[1])
    hf_model.train(was_training)
    return {k: float(np.mean([p[k] for p in parts])) for k in parts[0]}


def warmup_cosine(optimizer, warmup: int, total_steps: int):
    """Linear warm-up over ``warmup`` steps, then cosine decay to 10% of the base rate."""
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        done = (step - warmup) / max(1, total_steps - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * done))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def train(model_config: ModelConfig, train_config: TrainConfig, progress: bool = True) -> Trained:
    """Train from scratch: AdamW, linear warm-up then cosine decay, one dual-mode loss per step."""
    started = time.perf_counter()
    torch.manual_seed(train_config.seed)
    tokenizer, train_stream, heldout_stream = prepare_corpus(train_config, model_config.vocab_size)
    hf_model = build_model(model_config, train_config.seed)
    hf_model.config.mask_token_id = tokenizer.mask_token_id
    hf_model.config.eos_token_id = tokenizer.eos_token_id
    hf_model.config.pad_token_id = tokenizer.pad_token_id
    gen = torch.Generator().manual_seed(train_config.seed)
    eval_gen = torch.Generator().manual_seed(train_config.seed + 1)
    kwargs = dict(n_blocks=train_config.n_blocks, mask_token_id=tokenizer.mask_token_id,
                  p_full=train_config.p_full, p_branch=train_config.p_branch, decay=train_config.decay)
    widths = train_config.widths or (train_config.width,)
    eval_batches = [make_dual_mode_batch(windows(heldout_stream, train_config.seq_len, train_config.batch_size,
                                                 eval_gen), generator=eval_gen, width=train_config.width, **kwargs)
                    for _ in range(train_config.eval_batches)]
    optimizer = torch.optim.AdamW(hf_model.parameters(), lr=train_config.lr, weight_decay=0.01,
                                  betas=(0.9, 0.95))

    total_steps = train_config.steps + train_config.distill_steps

    schedule = warmup_cosine(optimizer, train_config.warmup, total_steps)
    hf_model.train()
    history = []
    distilled = None
    bar = tqdm(range(total_steps), desc="dual-mode training", disable=not progress)
    for step in bar:
        if step == train_config.steps and train_config.distill_steps:
            distilled = greedy_continuations(hf_model, train_stream, train_config, gen)
        rows = windows(train_stream, train_config.seq_len, train_config.batch_size, gen)
        if distilled is not None:                     # stage 2: mix in self-generated text
            own = int(round(train_config.distill_mix * train_config.batch_size))
            pick = torch.randint(0, distilled.shape[0], (own,), generator=gen)
            rows = torch.cat([rows[own:], distilled[pick]])
        width = widths[int(torch.randint(0, len(widths), (1,), generator=gen))]
        batch = make_dual_mode_batch(rows, generator=gen, width=width, **kwargs)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=train_config.bf16):
            loss, parts = dual_mode_loss(hf_model, batch, diffusion_weight=train_config.diffusion_weight)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(hf_model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        row = {"step": step + 1, "split": "train", "stage": 1 if distilled is None else 2, "width": width,
               **parts, "lr": schedule.get_last_lr()[0], "seconds": time.perf_counter() - started}
        history.append(row)
        if (step + 1) % train_config.eval_every == 0 or step + 1 == total_steps:
            history.append({**row, "split": "heldout", **heldout_loss(hf_model, eval_batches, train_config.bf16)})
        bar.set_postfix(ar=f"{parts['ar']:.3f}", diffusion=f"{parts['diffusion']:.3f}")
    hf_model.eval()
    record = {"train_tokens": int(len(train_stream)), "heldout_tokens": int(len(heldout_stream)),
              "train_seconds": time.perf_counter() - started, "data": data_fingerprint(train_config),
              "parameters": int(sum(p.numel() for p in hf_model.parameters())),
              "model_config": asdict(model_config), "train_config": asdict(train_config)}
    return Trained(hf_model, tokenizer, pd.DataFrame(history), record)


@torch.no_grad()
def greedy_continuations(hf_model, stream: np.ndarray, config: TrainConfig, generator: torch.Generator) -> torch.Tensor:
    """``(distill_prompts, seq_len)`` rows: a corpus window continued by the model's own greedy
    decoding (stage 2, self-distillation: the drafter learns what the verifier will say,
    as DEER's Stage I distils AR teacher answers).  Batched ``generate``, no EOS stop."""
    was_training = hf_model.training
    hf_model.eval()
    prompt_len = config.seq_len - config.distill_new_tokens
    prompts = windows(stream, prompt_len, config.distill_prompts, generator)
    rows = []
    for chunk in prompts.split(32):
        out = hf_model.generate(chunk, attention_mask=torch.ones_like(chunk), max_new_tokens=config.distill_new_tokens,
                                min_new_tokens=config.distill_new_tokens, do_sample=False, eos_token_id=None,
                                pad_token_id=hf_model.config.pad_token_id)
        rows.append(out)
    hf_model.train(was_training)
    return torch.cat(rows)


def save(trained: Trained, path: Path) -> Path:
    """``save_pretrained`` model and tokenizer plus history and record, written atomically."""
    with atomic_directory(path) as tmp:
        trained.hf_model.save_pretrained(tmp)
        trained.tokenizer.save_pretrained(tmp)
        trained.history.to_csv(tmp / "history.csv", index=False)
        (tmp / "record.json").write_text(json.dumps(trained.record, indent=2))
    trained.path = Path(path)
    return trained.path


def load(path: Path) -> Trained:
    """Load a checkpoint saved by :func:`save` (local files only)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path)
    hf_model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    history = pd.read_csv(path / "history.csv")
    record = json.loads((path / "record.json").read_text())
    return Trained(hf_model, tokenizer, history, record, path)


def load_or_train(model_config: ModelConfig, train_config: TrainConfig, progress: bool = True) -> Trained:
    """The cached checkpoint for these configs, training (and caching) it when missing."""
    path = artifacts_dir() / "models" / cache_key(model_config, train_config)
    if (path / "record.json").exists():
        return load(path)
    trained = train(model_config, train_config, progress=progress)
    save(trained, path)
    return trained


def fit_dual_mode(hf_model, sequences: torch.Tensor, *, steps: int, batch_size: int, width: int,
                  mask_token_id: int, n_blocks: int = 4, lr: float = 3e-3, seed: int = 0,
                  progress: bool = True) -> list[dict[str, float]]:
    """Train ``hf_model`` in place on rows of ``sequences`` ``(N, L)`` (small in-memory data,
    e.g. toy-chain samples for tests and the quickstart); returns the loss history."""
    if steps < 0 or batch_size < 1:
        raise ValueError(f"steps must be >= 0 and batch_size >= 1, got steps={steps}, batch_size={batch_size}")
    generator = torch.Generator().manual_seed(seed)
    dtype = next(hf_model.parameters()).dtype
    optimizer = torch.optim.AdamW(hf_model.parameters(), lr=lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 20))
    hf_model.train()
    history = []
    bar = tqdm(range(steps), desc="dual-mode training", disable=not progress, leave=False)
    for _ in bar:
        rows = torch.randint(0, sequences.shape[0], (batch_size,), generator=generator)
        batch = make_dual_mode_batch(sequences[rows], width=width, n_blocks=n_blocks,
                                     mask_token_id=mask_token_id, generator=generator, dtype=dtype)
        loss, parts = dual_mode_loss(hf_model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(hf_model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        history.append(parts)
        bar.set_postfix(ar=f"{parts['ar']:.3f}", diffusion=f"{parts['diffusion']:.3f}")
    hf_model.eval()
    return history
