"""Training DEER's drafters against a frozen AR target, with a checkpoint cache.

Reference: seed 001, Sec. 3.4 "Stage I" / "Stage II" and their training configurations
(App. A: AdamW, Stage II at half Stage I's learning rate); the objectives are in
:mod:`spec_lib.d2a`.

The pipeline of :func:`train_deer` (one :class:`D2AConfig`):

1. **AR target**: the self-speculative model of :mod:`spec_lib.checkpoints` used in AR mode
   only, frozen (the best AR model this project trains; no second 13-minute training run).
2. **Teacher data**: corpus windows continued greedily by the target (``generate``).
3. **Diffusion drafter**: a smaller Qwen3 run bidirectionally, pre-trained with the
   masked-diffusion objective on the corpus ("the pre-trained dLLM"), then Stage I on the
   teacher data, then Stage II once per ``alphas`` entry (the alpha sensitivity run).
4. **AR drafter** (the EAGLE-3 role): the same architecture run causally, pre-trained with
   next-token CE on the corpus, then distilled on the same teacher answers.

Checkpoints go to ``artifacts/drafters/<key>/<name>/`` (``save_pretrained``) with the loss
history, keyed by the configuration, the target's cache key and the training code.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from . import d2a, data
from .checkpoints import PRESETS
from .models import DualModeLM, build_qwen3
from .results import atomic_directory
from .train import artifacts_dir, cache_key, load_or_train, training_code_version, warmup_cosine, windows

TRAINING_CODE = ("d2a.py", "drafter_train.py", "data.py", "train.py", "losses.py", "masks.py")


@dataclass(frozen=True)
class D2AConfig:
    """Drafter architecture, teacher data and the schedule of every training stage."""

    target_preset: str = "cpu"
    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    teacher_prompts: int = 3072        # corpus windows continued by the target
    heldout_prompts: int = 64          # held-out windows, for the held-out curves
    prompt_len: int = 256
    answer_len: int = 128
    context: int = 256                 # drafter context window (tokens before SEP)
    min_context: int = 16
    max_suffix: int = 32               # Stage I suffix cap = the largest block size
    r_max: int = 32                    # Stage II R_max (the paper: 96 for longer answers)
    alpha: float = 1.01                # Stage II weight base of the drafter used downstream
    alphas: tuple[float, ...] = (1.01, 1.02, 1.05)
    t_min: float = 0.1
    context_noise: float = 0.2         # kept tokens are masked with probability context_noise * t
    batch_size: int = 32
    pretrain_len: int = 160
    pretrain_steps: int = 600
    stage1_steps: int = 1000
    stage2_steps: int = 200
    ar_pretrain_steps: int = 600
    ar_distill_steps: int = 400
    lr: float = 3e-3                   # pre-training
    stage1_lr: float = 1e-3
    stage2_lr: float = 5e-4            # half of Stage I's (App. A)
    warmup: int = 30
    eval_every: int = 50
    seed: int = 0
    max_files: int | None = None       # corpus files (smoke)


D2A_PRESETS: dict[str, D2AConfig] = {
    "smoke": D2AConfig(target_preset="smoke", hidden_size=32, num_layers=1, teacher_prompts=32, heldout_prompts=8,
                       prompt_len=32, answer_len=32, context=32, min_context=8, max_suffix=16, r_max=16,
                       batch_size=8, pretrain_len=48, pretrain_steps=6, stage1_steps=6, stage2_steps=4,
                       ar_pretrain_steps=6, ar_distill_steps=4, eval_every=3, max_files=20),
    "cpu": D2AConfig(),
}


@dataclass
class DeerModels:
    """A frozen target, its tokenizer and the trained drafters (``hf_models[name]``)."""

    target: DualModeLM
    tokenizer: object
    hf_models: dict
    history: pd.DataFrame
    record: dict = field(default_factory=dict)
    config: D2AConfig | None = None
    path: Path | None = None

    def diffusion_drafter(self, name: str | None = None):
        """The DEER drafter ``name`` (default: Stage II at ``config.alpha``)."""
        from .drafters import DiffusionDrafter

        name = name or stage2_name(self.config.alpha)
        if name not in self.hf_models or name.startswith("ar_"):
            raise ValueError(f"name must be one of {[n for n in self.hf_models if not n.startswith('ar_')]}, "
                             f"got {name!r}")
        return DiffusionDrafter(self.hf_models[name], self.tokenizer.mask_token_id, self.tokenizer.sep_token_id,
                                context=self.config.context)

    def ar_drafter(self):
        from .drafters import ARDrafter

        return ARDrafter(self.hf_models["ar_distilled"])


def stage2_name(alpha: float) -> str:
    return f"stage2_alpha{alpha:g}"


def deer_cache_key(config: D2AConfig) -> str:
    target = cache_key(*PRESETS[config.target_preset])
    blob = json.dumps({"config": asdict(config), "target": target, "code": training_code_version(TRAINING_CODE)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@torch.no_grad()
def teacher_answers(target_hf, prompts: torch.Tensor, answer_len: int, batch: int = 64,
                    progress: bool = True) -> torch.Tensor:
    """``(N, answer_len)`` greedy continuations of ``prompts`` by the frozen target (Stage I's
    teacher answers), batched ``generate`` without EOS stopping."""
    out = []
    for chunk in tqdm(prompts.split(batch), desc="teacher answers", disable=not progress, leave=False):
        full = target_hf.generate(chunk, attention_mask=torch.ones_like(chunk), max_new_tokens=answer_len,
                                  min_new_tokens=answer_len, do_sample=False, eos_token_id=None,
                                  pad_token_id=target_hf.config.pad_token_id)
        out.append(full[:, chunk.shape[1]:])
    return torch.cat(out)


def _build(config: D2AConfig, vocab_size: int, tokenizer, seed: int):
    model = build_qwen3(vocab_size, hidden_size=config.hidden_size, num_layers=config.num_layers,
                        num_heads=config.num_heads, max_positions=max(512, config.prompt_len + config.answer_len + 1),
                        seed=seed)
    for name in ("mask", "sep", "pad", "eos"):
        setattr(model.config, f"{name}_token_id", getattr(tokenizer, f"{name}_token_id"))
    return model


def _fit(model, name: str, steps: int, lr: float, warmup: int, make_batch, loss_fn, eval_batches: list,
         eval_every: int, progress: bool) -> list[dict]:
    """AdamW, linear warm-up then cosine decay to 10%; held-out loss every ``eval_every`` steps."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.95))
    schedule = warmup_cosine(optimizer, warmup, steps)
    history, started = [], time.perf_counter()
    model.train()
    bar = tqdm(range(steps), desc=name, disable=not progress, leave=False)
    for step in bar:
        loss, parts = loss_fn(model, make_batch())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
        optimizer.step()
        schedule.step()
        row = {"model": name, "step": step + 1, "split": "train", **parts, "grad_norm": grad_norm,
               "seconds": time.perf_counter() - started}
        history.append(row)
        if (step + 1) % eval_every == 0 or step + 1 == steps:
            model.eval()
            with torch.no_grad():
                parts_ = [loss_fn(model, b)[1] for b in eval_batches]
            model.train()
            history.append({**row, "split": "heldout", **{k: float(np.mean([p[k] for p in parts_])) for k in parts_[0]}})
        bar.set_postfix(loss=f"{parts['loss']:.3f}")
    model.eval()
    return history


def train_deer(config: D2AConfig, progress: bool = True) -> DeerModels:
    """Run the whole pipeline (see the module docstring); deterministic given ``config.seed``."""
    started = time.perf_counter()
    if config.target_preset not in PRESETS:
        raise ValueError(f"target_preset must be one of {list(PRESETS)}, got {config.target_preset!r}")
    model_config, target_config = PRESETS[config.target_preset]
    target = load_or_train(model_config, target_config, progress=progress)
    target_hf, tokenizer = target.hf_model.eval(), target.tokenizer
    for p in target_hf.parameters():
        p.requires_grad_(False)
    torch.manual_seed(config.seed)
    gen = torch.Generator().manual_seed(config.seed)
    docs = data.training_documents(target_config.math_share, target_config.copy_share, target_config.seed,
                                   max_files=config.max_files or target_config.max_files)
    stream = data.token_stream(docs, tokenizer)
    heldout_docs = [data.read_source(p) for p in data.stdlib_files("heldout")[: config.max_files]]
    heldout = data.token_stream(heldout_docs, tokenizer)
    t0 = time.perf_counter()
    prompts = windows(stream, config.prompt_len, config.teacher_prompts, gen)
    answers = teacher_answers(target_hf, prompts, config.answer_len, progress=progress)
    heldout_prompts = windows(heldout, config.prompt_len, config.heldout_prompts, gen)
    heldout_answers = teacher_answers(target_hf, heldout_prompts, config.answer_len, progress=progress)
    teacher_seconds = time.perf_counter() - t0
    vocab = int(target_hf.config.vocab_size)
    ids = dict(mask_token_id=tokenizer.mask_token_id)
    cont = dict(**ids, sep_token_id=tokenizer.sep_token_id, pad_token_id=tokenizer.pad_token_id,
                context=config.context, min_context=config.min_context, max_suffix=config.max_suffix,
                r_max=config.r_max, t_min=config.t_min, context_noise=config.context_noise)
    eval_gen = torch.Generator().manual_seed(config.seed + 1)
    n_eval = min(config.heldout_prompts, config.batch_size)

    def rows(n):
        return torch.randint(0, prompts.shape[0], (n,), generator=gen)

    def teacher_eval(stage, alpha=1.0):
        return [d2a.continuation_batch(heldout_prompts[i: i + n_eval], heldout_answers[i: i + n_eval], stage=stage,
                                       alpha=alpha, generator=eval_gen, **cont)
                for i in range(0, config.heldout_prompts, n_eval)]

    history = []
    models = {}
    common = dict(warmup=config.warmup, eval_every=config.eval_every, progress=progress)
    # 3. diffusion drafter: masked-diffusion pre-training, Stage I, Stage II (per alpha)
    dllm = _build(config, vocab, tokenizer, config.seed)
    corpus_eval = [d2a.masked_diffusion_batch(windows(heldout, config.pretrain_len, n_eval, eval_gen), generator=eval_gen,
                                              t_min=config.t_min, **ids)]
    history += _fit(dllm, "pretrained", config.pretrain_steps, config.lr,
                    make_batch=lambda: d2a.masked_diffusion_batch(windows(stream, config.pretrain_len, config.batch_size,
                                                                          gen), generator=gen, t_min=config.t_min, **ids),
                    loss_fn=d2a.diffusion_loss, eval_batches=corpus_eval, **common)
    models["pretrained"] = copy.deepcopy(dllm)

    def stage_batch(stage, alpha=1.0):
        def make():
            pick = rows(config.batch_size)
            return d2a.continuation_batch(prompts[pick], answers[pick], stage=stage, alpha=alpha, generator=gen, **cont)
        return make

    stage1_eval = teacher_eval(1)
    history += _fit(dllm, "stage1", config.stage1_steps, config.stage1_lr, make_batch=stage_batch(1),
                    loss_fn=d2a.diffusion_loss, eval_batches=stage1_eval, **common)
    models["stage1"] = copy.deepcopy(dllm)
    for alpha in config.alphas:
        refined = copy.deepcopy(models["stage1"])
        history += _fit(refined, stage2_name(alpha), config.stage2_steps, config.stage2_lr,
                        make_batch=stage_batch(2, alpha), loss_fn=d2a.diffusion_loss,
                        eval_batches=teacher_eval(2, alpha), **common)
        models[stage2_name(alpha)] = refined
    # 4. AR drafter: next-token pre-training on the corpus, then distillation on the teacher answers
    ar = _build(config, vocab, tokenizer, config.seed + 7)
    ar_eval = [d2a.ar_batch(windows(heldout, config.pretrain_len, n_eval, eval_gen))]
    history += _fit(ar, "ar_pretrained", config.ar_pretrain_steps, config.lr,
                    make_batch=lambda: d2a.ar_batch(windows(stream, config.pretrain_len, config.batch_size, gen)),
                    loss_fn=lambda m, b: d2a.ar_loss(m, *b), eval_batches=ar_eval, **common)

    def distill_batch():
        pick = rows(config.batch_size)
        return d2a.ar_batch(prompts[pick], answers[pick])

    history += _fit(ar, "ar_distilled", config.ar_distill_steps, config.stage1_lr, make_batch=distill_batch,
                    loss_fn=lambda m, b: d2a.ar_loss(m, *b),
                    eval_batches=[d2a.ar_batch(heldout_prompts[:n_eval], heldout_answers[:n_eval])], **common)
    models["ar_distilled"] = ar
    record = {"train_seconds": time.perf_counter() - started, "teacher_seconds": teacher_seconds,
              "corpus_tokens": int(len(stream)), "heldout_tokens": int(len(heldout)),
              "teacher_rows": int(prompts.shape[0]), "teacher_tokens": int(answers.numel()),
              "drafter_parameters": int(sum(p.numel() for p in dllm.parameters())),
              "target_parameters": int(sum(p.numel() for p in target_hf.parameters())),
              "config": asdict(config)}
    return DeerModels(DualModeLM(target_hf, tokenizer.mask_token_id), tokenizer, models, pd.DataFrame(history),
                      record, config)


def save_deer(models: DeerModels, path: Path) -> Path:
    """Every drafter with ``save_pretrained``, plus history and record, written atomically."""
    with atomic_directory(path) as tmp:
        for name, hf_model in models.hf_models.items():
            hf_model.save_pretrained(tmp / name)
        models.history.to_csv(tmp / "history.csv", index=False)
        (tmp / "record.json").write_text(json.dumps(models.record, indent=2))
    models.path = Path(path)
    return models.path


def load_deer(preset: str = "cpu", *, dtype: torch.dtype = torch.float32, device: str = "cpu",
              progress: bool = True) -> DeerModels:
    """The target and drafters of a :data:`D2A_PRESETS` entry: cached, or trained now and cached."""
    from transformers import AutoModelForCausalLM

    if preset not in D2A_PRESETS:
        raise ValueError(f"preset must be one of {list(D2A_PRESETS)}, got {preset!r}")
    config = D2A_PRESETS[preset]
    path = artifacts_dir() / "drafters" / deer_cache_key(config)
    if not (path / "record.json").exists():
        save_deer(train_deer(config, progress=progress), path)
    target = load_or_train(*PRESETS[config.target_preset], progress=progress)
    names = ["pretrained", "stage1", *map(stage2_name, config.alphas), "ar_distilled"]
    hf_models = {n: AutoModelForCausalLM.from_pretrained(path / n, local_files_only=True, dtype=dtype).to(device).eval()
                 for n in names}
    return DeerModels(DualModeLM(target.hf_model.to(device=device, dtype=dtype).eval(), target.mask_token_id),
                      target.tokenizer,
                      hf_models, pd.read_csv(path / "history.csv"), json.loads((path / "record.json").read_text()),
                      config, path)
