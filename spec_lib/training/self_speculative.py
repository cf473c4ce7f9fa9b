"""Training the self-speculative (AR + diffusion) model: the pipeline and its checkpoint cache.

Reference: seed 000, Sec. 2.2 (one network with AR and diffusion modes, trained jointly on
both objectives, as Nemotron-Labs-Diffusion and TiDAR are).  The objective is
:mod:`spec_lib.training.dual_mode`, the data :mod:`spec_lib.training.data`, the loop
:func:`spec_lib.training.loop.fit`.

Two stages, each with its own warm-up + cosine learning-rate schedule:

1. **dual-mode pre-training** on the corpus (AR CE on the causal stream, block-diffusion CE
   on drafting blocks);
2. **self-distillation**: the model continues corpus windows greedily (its own AR mode, the
   verifier); each stage-2 batch is a full batch of corpus rows (both losses, as in stage 1)
   plus ``distill_rows`` of those continuations, with drafting blocks cut inside the
   generated part, so the diffusion mode learns what verification will accept (the analogue
   of DEER's Stage I, seed 001 Sec. 3.4).  By default the AR loss is *not* applied to the
   self-generated rows (``distill_ar=False``): training the verifier on its own greedy text
   teaches it to repeat itself, and acceptance earned on loops is not the acceptance the
   papers measure.  With ``distill_unlikelihood`` > 0 the AR mode is instead pushed *away*
   from its loops: every token of its own text that closes a repeated 4-gram is an
   unlikelihood candidate (:mod:`spec_lib.training.unlikelihood`, Welleck et al. 2020), and
   with ``distill_refresh`` = R the own text is regenerated every R steps, so the candidates
   are those of the current model.

:func:`load_or_train` returns a model for a (:class:`ModelConfig`, :class:`TrainConfig`) pair:
from ``artifacts/models/<key>/`` when that checkpoint exists, else it trains and saves one
there (``save_pretrained``; the stage-1 model, the loss history and a record beside it).
Training is resumable: each stage saves its state every few minutes
(:func:`spec_lib.training.cache.stage_resume`), and a killed run continues from there.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ..architectures import build_qwen3
from . import data, unlikelihood
from .cache import cache_key, checkpoint_dir, checkpoint_writer, finish_partial, stage_resume
from .dual_mode import dual_mode_loss, make_dual_mode_batch
from .loop import fit
from .teacher import greedy_continuations

PIPELINE = "spec_lib.training.self_speculative"


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
    teacher_weight: float = 0.0    # stage 1: weight of KL(p_AR || q) at offset 1 (dual_mode_loss)
    lr: float = 3e-3
    warmup: int = 30
    distill_steps: int = 0         # stage 2: steps with the model's own greedy continuations
    distill_prompts: int = 256     # corpus windows continued greedily for stage 2
    distill_new_tokens: int = 128  # tokens generated per stage-2 prompt
    distill_rows: int = 8          # self-generated rows in each stage-2 batch
    distill_corpus_rows: int = 16  # corpus rows in each stage-2 batch (both losses)
    distill_teacher_weight: float = 0.0  # stage 2: weight of KL(p_AR || q) (offset 1; every offset of own text)
    distill_lr: float = 1e-3       # stage 2's own peak learning rate
    distill_blocks: int = 0        # drafting blocks per row in stage 2 (0: n_blocks)
    distill_ar: bool = False       # also train the AR mode on its own greedy text
    distill_unlikelihood: float = 0.0  # weight of unlikelihood on repeated 4-grams of the own text
    distill_refresh: int = 0       # regenerate the own text every so many stage-2 steps (0: once)
    bf16: bool = False             # torch.autocast("cpu", bfloat16)
    seed: int = 0
    math_share: float = 0.1        # synthetic math text, as a share of the stdlib characters
    copy_share: float = 0.05       # copy-with-one-change examples, same
    max_files: int | None = None   # use only the first files of the corpus (smoke)
    eval_every: int = 50           # held-out loss every so many steps
    eval_batches: int = 4

    def __post_init__(self):
        for name in ("steps", "distill_steps", "distill_refresh"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        for name in ("diffusion_weight", "teacher_weight", "distill_teacher_weight", "distill_unlikelihood"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"{name} must be a number >= 0, got {value!r}")
        if self.distill_steps and self.distill_new_tokens < 1:
            raise ValueError(f"distill_new_tokens must be >= 1 with distill_steps, got {self.distill_new_tokens!r}")


@dataclass
class Trained:
    """A trained (or loaded) model with its tokenizer and training record."""

    hf_model: object
    tokenizer: object
    history: pd.DataFrame
    record: dict = field(default_factory=dict)
    path: Path | None = None
    stage1: object = None          # the model after stage 1 (before self-distillation)

    @property
    def mask_token_id(self) -> int:
        return int(self.tokenizer.mask_token_id)


def data_fingerprint(config: TrainConfig) -> dict:
    """What the corpus depends on: the Python version and the stdlib files used (and sizes)."""
    files = data.stdlib_files("train")[: config.max_files]
    listing = hashlib.sha256("".join(f"{p.name}:{p.stat().st_size};" for p in files).encode()).hexdigest()[:12]
    return {"python": data.python_version(), "files": len(files), "listing": listing}


def checkpoint_key(model_config: ModelConfig, train_config: TrainConfig) -> str:
    """Cache key: configs, data fingerprint and the source of every module this pipeline imports."""
    return cache_key(PIPELINE, model=asdict(model_config), train=asdict(train_config),
                     data=data_fingerprint(train_config))


def build_model(config: ModelConfig, seed: int):
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


@dataclass
class _Run:
    """What both stages share: the data, the block settings, the generators and the loss."""

    config: TrainConfig
    tokenizer: object
    train_stream: np.ndarray
    heldout_stream: np.ndarray
    gen: torch.Generator
    eval_batches: list
    progress: bool
    key: str = ""                  # checkpoint whose training state each stage saves (resume)
    resumed_seconds: float = 0.0   # training seconds spent before this process

    @classmethod
    def prepare(cls, model_config: ModelConfig, config: TrainConfig, progress: bool, seed_offset: int = 0,
                key: str = "") -> "_Run":
        tokenizer, train_stream, heldout_stream = prepare_corpus(config, model_config.vocab_size)
        eval_gen = torch.Generator().manual_seed(config.seed + 1)
        run = cls(config, tokenizer, train_stream, heldout_stream,
                  torch.Generator().manual_seed(config.seed + seed_offset), [], progress, key)
        run.eval_batches = [make_dual_mode_batch(windows(heldout_stream, config.seq_len, config.batch_size, eval_gen),
                                                 generator=eval_gen, width=config.width, n_blocks=config.n_blocks,
                                                 **run.blocks) for _ in range(config.eval_batches)]
        return run

    @property
    def blocks(self) -> dict:
        cfg = self.config
        return dict(mask_token_id=self.tokenizer.mask_token_id, p_full=cfg.p_full, p_branch=cfg.p_branch, decay=cfg.decay)

    def width(self) -> int:
        widths = self.config.widths or (self.config.width,)
        return widths[int(torch.randint(0, len(widths), (1,), generator=self.gen))]

    def fit(self, model, make_batch, steps: int, lr: float, label: str, teacher_weight: float,
            unlikelihood_weight: float = 0.0, state: dict | None = None) -> list[dict]:
        """One stage through :func:`~spec_lib.training.loop.fit`, resumable when the run has a key
        (``state``: what the batch function keeps between steps, saved with the loop)."""
        cfg = self.config

        def loss(model, batch):
            return dual_mode_loss(model, batch, diffusion_weight=cfg.diffusion_weight, teacher_weight=teacher_weight,
                                  unlikelihood_weight=unlikelihood_weight)

        resume = stage_resume("models", self.key, label, [self.gen], state) if self.key else None
        history = fit(model, make_batch, loss, steps=steps, lr=lr, label=label, eval_batches=self.eval_batches,
                      eval_every=cfg.eval_every, autocast=cfg.bf16, progress=self.progress, warmup=cfg.warmup,
                      resume=resume)
        self.resumed_seconds += resume.restored_seconds if resume else 0.0
        return history


def dual_mode_stage(hf_model, run: _Run) -> list[dict]:
    """Stage 1: both objectives on corpus windows, ``steps`` steps at ``lr``."""
    cfg = run.config

    def corpus_batch(step: int):
        rows = windows(run.train_stream, cfg.seq_len, cfg.batch_size, run.gen)
        return make_dual_mode_batch(rows, generator=run.gen, width=run.width(), n_blocks=cfg.n_blocks, **run.blocks)

    return run.fit(hf_model, corpus_batch, cfg.steps, cfg.lr, "stage 1: dual-mode", cfg.teacher_weight)


def self_distillation_stage(hf_model, run: _Run) -> tuple[list[dict], int]:
    """Stage 2 (see the module docstring): a full corpus batch plus ``distill_rows`` of the
    model's own greedy continuations per step, blocks on those cut inside the generated
    part, AR loss on them only with ``distill_ar``, unlikelihood on their repeated 4-grams
    with ``distill_unlikelihood``; the own text is regenerated every ``distill_refresh``
    steps.  Returns the history and the number of continuations generated per refresh."""
    cfg = run.config
    prompt_len = cfg.seq_len - cfg.distill_new_tokens
    prompts = windows(run.train_stream, prompt_len, cfg.distill_prompts, run.gen)
    n_own, n_corpus = cfg.distill_rows, cfg.distill_corpus_rows
    min_cut = torch.cat([torch.ones(n_corpus, dtype=torch.long), torch.full((n_own,), prompt_len)])
    ar_rows = torch.cat([torch.ones(n_corpus, dtype=torch.bool), torch.full((n_own,), cfg.distill_ar)])
    own_rows = torch.cat([torch.zeros(n_corpus, dtype=torch.bool), torch.ones(n_own, dtype=torch.bool)])
    state: dict = {}

    def refresh(step: int) -> None:
        if "own_text" in state and not (cfg.distill_refresh and step % cfg.distill_refresh == 0):
            return
        generated = greedy_continuations(hf_model, prompts, cfg.distill_new_tokens, progress=run.progress,
                                         label=f"self-distillation text (step {step})")
        state["own_text"] = torch.cat([prompts, generated], 1)
        state["unlikely"] = torch.cat([torch.zeros_like(prompts, dtype=torch.bool), unlikelihood.repeated_ngrams(generated)], 1)

    def distill_batch(step: int):
        refresh(step)
        own = torch.randint(0, prompts.shape[0], (n_own,), generator=run.gen)
        rows = torch.cat([windows(run.train_stream, cfg.seq_len, n_corpus, run.gen), state["own_text"][own]])
        unlikely = (torch.cat([torch.zeros(n_corpus, cfg.seq_len, dtype=torch.bool), state["unlikely"][own]])
                    if cfg.distill_unlikelihood else None)
        return make_dual_mode_batch(rows, generator=run.gen, width=run.width(), n_blocks=cfg.distill_blocks or cfg.n_blocks,
                                    min_cut=min_cut, ar_rows=ar_rows, own_rows=own_rows, unlikely=unlikely, **run.blocks)

    history = run.fit(hf_model, distill_batch, cfg.distill_steps, cfg.distill_lr, "stage 2: self-distillation",
                      cfg.distill_teacher_weight, cfg.distill_unlikelihood, state)
    return history, int(prompts.shape[0])


def _record(hf_model, run: _Run, model_config: ModelConfig, started: float, distilled_rows: int, key: str) -> dict:
    return {"train_tokens": int(len(run.train_stream)), "heldout_tokens": int(len(run.heldout_stream)),
            "distilled_rows": distilled_rows, "train_seconds": time.perf_counter() - started + run.resumed_seconds,
            "data": data_fingerprint(run.config), "parameters": int(sum(p.numel() for p in hf_model.parameters())),
            "model_config": asdict(model_config), "train_config": asdict(run.config), "checkpoint_key": key}


def train(model_config: ModelConfig, train_config: TrainConfig, progress: bool = True, resume: bool = False) -> Trained:
    """Train from scratch: stage 1 (dual-mode) then stage 2 (self-distillation); deterministic.
    With ``resume``, each stage saves its state under the checkpoint's ``.partial`` folder and
    continues from a saved state (same weights as an uninterrupted run)."""
    started = time.perf_counter()
    torch.manual_seed(train_config.seed)
    key = checkpoint_key(model_config, train_config)
    run = _Run.prepare(model_config, train_config, progress, key=key if resume else "")
    hf_model = build_model(model_config, train_config.seed)
    for name in ("mask", "eos", "pad"):
        setattr(hf_model.config, f"{name}_token_id", getattr(run.tokenizer, f"{name}_token_id"))
    history = dual_mode_stage(hf_model, run)
    stage1, distilled_rows = None, 0
    if train_config.distill_steps:
        stage1 = copy.deepcopy(hf_model).eval()
        stage2, distilled_rows = self_distillation_stage(hf_model, run)
        history += stage2
    record = _record(hf_model, run, model_config, started, distilled_rows, key)
    return Trained(hf_model, run.tokenizer, pd.DataFrame(history), record, stage1=stage1)


#: Fields of TrainConfig that only stage 2 reads: a variant may change these and keep stage 1.
STAGE2_FIELDS = ("distill_steps", "distill_prompts", "distill_new_tokens", "distill_rows", "distill_corpus_rows",
                 "distill_lr", "distill_blocks", "distill_ar", "distill_teacher_weight", "distill_unlikelihood",
                 "distill_refresh")


def variant_key(model_config: ModelConfig, train_config: TrainConfig, overrides: dict) -> str:
    """Cache key of a stage-2 variant of a checkpoint (its own namespace: stage 1 is shared)."""
    return cache_key(PIPELINE, model=asdict(model_config), train=asdict(train_config), data=data_fingerprint(train_config),
                     stage2_variant=sorted(overrides.items()))


def load_or_distill_variant(model_config: ModelConfig, train_config: TrainConfig, overrides: dict,
                            progress: bool = True) -> Trained:
    """The preset's stage-1 model, self-distilled again with stage-2 settings ``overrides``
    (an ablation of the recipe that reuses stage 1); cached like a checkpoint.

    Raises:
        ValueError: an override names a field stage 1 reads (those need a full retrain).
    """
    bad = sorted(set(overrides) - set(STAGE2_FIELDS))
    if bad:
        raise ValueError(f"overrides may only change stage-2 fields {list(STAGE2_FIELDS)}, got {bad}")
    path = checkpoint_dir("models", variant_key(model_config, train_config, overrides))
    if (path / "record.json").exists():
        return load(path)
    base = load_or_train(model_config, train_config, progress=progress)
    started = time.perf_counter()
    config = replace(train_config, **overrides)
    torch.manual_seed(config.seed)
    run = _Run.prepare(model_config, config, progress, seed_offset=1000, key=path.name)
    hf_model = copy.deepcopy(base.stage1).train()
    stage1_history = base.history[base.history["stage"] == "stage 1: dual-mode"].to_dict("records")
    history, distilled_rows = (self_distillation_stage(hf_model, run) if config.distill_steps else ([], 0))
    hf_model.eval()
    record = _record(hf_model, run, model_config, started, distilled_rows, path.name)
    trained = Trained(hf_model, base.tokenizer, pd.DataFrame(stage1_history + history), record)
    save(trained, path)                             # without stage 1: the preset's checkpoint holds it
    finish_partial("models", path.name)
    trained.stage1 = base.stage1
    return trained


def save(trained: Trained, path: Path) -> Path:
    """``save_pretrained`` model (and the stage-1 model) and tokenizer, plus history and record,
    written atomically."""
    with checkpoint_writer(path) as tmp:
        trained.hf_model.save_pretrained(tmp)
        trained.tokenizer.save_pretrained(tmp)
        if trained.stage1 is not None:
            trained.stage1.save_pretrained(tmp / "stage1")
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
    stage1 = (AutoModelForCausalLM.from_pretrained(path / "stage1", local_files_only=True).eval()
              if (path / "stage1" / "config.json").exists() else None)
    history = pd.read_csv(path / "history.csv")
    record = json.loads((path / "record.json").read_text())
    return Trained(hf_model, tokenizer, history, record, path, stage1)


def load_or_train(model_config: ModelConfig, train_config: TrainConfig, progress: bool = True) -> Trained:
    """The cached checkpoint for these configs, training (and caching) it when missing."""
    path = checkpoint_dir("models", checkpoint_key(model_config, train_config))
    if (path / "record.json").exists():
        return load(path)
    trained = train(model_config, train_config, progress=progress, resume=True)
    save(trained, path)
    finish_partial("models", path.name)
    return trained


def fit_dual_mode(hf_model, sequences: torch.Tensor, *, steps: int, batch_size: int, width: int,
                  mask_token_id: int, n_blocks: int = 4, lr: float = 3e-3, seed: int = 0,
                  progress: bool = True) -> list[dict]:
    """Train ``hf_model`` in place on rows of ``sequences`` ``(N, L)`` (small in-memory data,
    e.g. toy-chain samples for tests and the quickstart); returns the loss history."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
    generator = torch.Generator().manual_seed(seed)

    def batch(step: int):
        rows = torch.randint(0, sequences.shape[0], (batch_size,), generator=generator)
        return make_dual_mode_batch(sequences[rows], width=width, n_blocks=n_blocks, mask_token_id=mask_token_id,
                                    generator=generator)

    torch.manual_seed(seed)
    return fit(hf_model, batch, dual_mode_loss, steps=steps, lr=lr, warmup=20, weight_decay=0.0, betas=(0.9, 0.999),
               label="dual-mode training", progress=progress)
