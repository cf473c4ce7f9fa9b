"""Proposal-only LoRA (seed 000, App. F.2): a pure AR model trained here, then a LoRA adapter on
its attention output projections trained with the diffusion objective on proposal rows only.

1. **AR base**: a Qwen3 of the cpu model's shape trained with next-token CE only
   (:mod:`spec_lib.training.next_token`) on the same corpus and tokenizer as the
   self-speculative model; it has never seen a MASK token.
2. **Adapter**: ``peft`` LoRA (rank ``rank``, alpha ``alpha``, on ``target_modules``), base
   weights frozen.  Each step lays corpus windows out like the dual-mode objective
   (:func:`spec_lib.training.dual_mode.make_dual_mode_batch`: drafting blocks cut at random
   points, fully masked with ``p_full``); the causal stream runs with the adapter disabled (it
   is the verifier, unchanged), the blocks run over its cache with the adapter enabled; the
   loss is the offset-weighted diffusion CE plus ``teacher_weight`` x KL(p_AR || q) at offset 1
   (the base model's own next-token distribution, which is what verification accepts).

Both are cached under ``artifacts/lora/<key>/`` (``base/`` by ``save_pretrained``, ``adapter/`` by
peft's ``save_pretrained``), keyed by the configs, the corpus fingerprint and the source of this
pipeline's import closure.  Training resumes from the last save: each stage saves its state
under ``artifacts/lora/<key>.partial/`` (:func:`spec_lib.training.cache.stage_resume`).
"""

from __future__ import annotations

import copy
import json
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F

from .cache import cache_key, checkpoint_dir, checkpoint_writer, finish_partial, preset_config, stage_resume
from .dual_mode import make_dual_mode_batch
from .loop import fit
from .next_token import ar_batch, ar_loss
from .self_speculative import ModelConfig, TrainConfig, build_model, data_fingerprint, prepare_corpus, windows

PIPELINE = "spec_lib.training.proposal_lora"


@dataclass(frozen=True)
class LoRAConfig:
    """The AR base's training and the adapter's (App. F.2: attention output projections)."""

    base_steps: int = 800
    base_lr: float = 3e-3
    base_batch_size: int = 16
    rank: int = 16
    alpha: int = 32
    target_modules: tuple[str, ...] = ("o_proj",)
    steps: int = 400
    lr: float = 2e-3
    batch_size: int = 16
    seq_len: int = 256
    widths: tuple[int, ...] = (7, 15, 31)
    n_blocks: int = 3
    p_full: float = 1.0
    decay: float = 8.0
    teacher_weight: float = 1.0
    eval_every: int = 50
    seed: int = 0


#: (model shape, corpus settings of the self-speculative preset, LoRA recipe) per profile
LORA_PRESETS: dict[str, tuple[ModelConfig, TrainConfig, LoRAConfig]] = {
    "smoke": (ModelConfig(vocab_size=512, hidden_size=64, num_layers=2, num_heads=4),
              TrainConfig(seq_len=128, max_files=20),
              LoRAConfig(base_steps=40, base_batch_size=8, rank=4, alpha=8, steps=60, lr=5e-3, batch_size=8,
                         seq_len=128, widths=(3, 7), n_blocks=2, eval_every=20)),
    "cpu": (ModelConfig(vocab_size=4096, hidden_size=256, num_layers=4, num_heads=4),
            TrainConfig(seq_len=256, copy_share=0.03),
            LoRAConfig()),
}


@dataclass
class TrainedLoRA:
    """The AR base (a transformers model), its tokenizer, the adapter directory and the record."""

    base: object
    tokenizer: object
    adapter_path: Path
    history: pd.DataFrame
    record: dict

    @property
    def mask_token_id(self) -> int:
        return int(self.tokenizer.mask_token_id)


def lora_key(preset: str) -> str:
    """Cache key of a preset's base + adapter."""
    model_config, train_config, lora_config = _preset(preset)
    return cache_key(PIPELINE, model=asdict(model_config), corpus=asdict(train_config), lora=asdict(lora_config),
                     data=data_fingerprint(train_config))


def _preset(preset: str):
    return preset_config(LORA_PRESETS, preset)


def adapter_loss(peft_model, batch, teacher_weight: float) -> tuple[torch.Tensor, dict[str, float]]:
    """Diffusion CE (offset-weighted) on masked block rows, adapter on, over the cache of the
    causal stream computed with the adapter off; plus ``teacher_weight`` x KL(p_AR || q) where
    the AR teacher is known (offset 1)."""
    from transformers import DynamicCache

    base = peft_model.get_base_model()
    device = next(base.parameters()).device
    b, length = batch.input_ids.shape
    cache = DynamicCache(config=base.config)
    with torch.no_grad(), peft_model.disable_adapter():
        ar_logits = base(input_ids=batch.input_ids.to(device), position_ids=torch.arange(length, device=device).expand(b, -1),
                         cache=cache, use_cache=True).logits.float()
    hidden = base.model(input_ids=batch.block_ids.to(device), position_ids=batch.block_positions.to(device),
                        attention_mask=batch.block_mask.to(device, base.dtype), cache=cache,
                        use_cache=True).last_hidden_state
    labels = batch.diffusion_labels.to(device)
    scored = labels >= 0
    logits = base.get_output_embeddings()(hidden[scored]).float()
    weights = batch.diffusion_weights.to(device)[scored]
    diffusion = (weights * F.cross_entropy(logits, labels[scored], reduction="none")).sum() / weights.sum().clamp(min=1e-8)
    rows = batch.teacher_rows.to(device)[scored]
    known = rows >= 0
    index = torch.arange(b, device=device)[:, None].expand_as(labels)[scored][known]
    teacher = F.log_softmax(ar_logits[index, rows[known]], dim=-1)
    kl = F.kl_div(F.log_softmax(logits[known], dim=-1), teacher, log_target=True, reduction="none").sum(-1)
    teacher_term = (weights[known] * kl).sum() / weights[known].sum().clamp(min=1e-8)
    with torch.no_grad():
        accuracy = (logits.argmax(-1) == labels[scored]).float().mean()
    loss = diffusion + teacher_weight * teacher_term
    return loss, {"diffusion": float(diffusion.detach()), "teacher": float(teacher_term.detach()),
                  "accuracy": float(accuracy)}


def train(preset: str, path: Path, progress: bool = True, key: str = "") -> Path:
    """Train the AR base, then the adapter (see the module docstring), and save both under
    ``path`` atomically; deterministic.  With the checkpoint ``key``, each stage resumes from its
    last save."""
    from peft import LoraConfig, get_peft_model

    model_config, train_config, cfg = _preset(preset)
    started = time.perf_counter()
    torch.manual_seed(cfg.seed)
    tokenizer, train_stream, heldout_stream = prepare_corpus(train_config, model_config.vocab_size)
    gen = torch.Generator().manual_seed(cfg.seed)
    base = build_model(model_config, cfg.seed)
    for name in ("mask", "eos", "pad"):
        setattr(base.config, f"{name}_token_id", getattr(tokenizer, f"{name}_token_id"))
    eval_gen = torch.Generator().manual_seed(cfg.seed + 1)
    ar_eval = [ar_batch(windows(heldout_stream, cfg.seq_len, cfg.base_batch_size, eval_gen)) for _ in range(4)]
    base_resume = stage_resume("lora", key, "AR base", [gen]) if key else None
    history = fit(base, lambda step: ar_batch(windows(train_stream, cfg.seq_len, cfg.base_batch_size, gen)),
                  lambda model, batch: ar_loss(model, *batch), steps=cfg.base_steps, lr=cfg.base_lr,
                  eval_batches=ar_eval, eval_every=cfg.eval_every, label="AR base", progress=progress,
                  resume=base_resume)
    base_seconds = time.perf_counter() - started + (base_resume.restored_seconds if base_resume else 0.0)
    ar_only = copy.deepcopy(base).eval()                  # saved as is: peft wraps `base` in place
    base.requires_grad_(False)
    with warnings.catch_warnings():                       # peft reads a deprecated transformers attribute
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        peft_model = get_peft_model(base, LoraConfig(r=cfg.rank, lora_alpha=cfg.alpha, lora_dropout=0.0,
                                                     target_modules=list(cfg.target_modules)))
    mask_id = tokenizer.mask_token_id

    def block_batch(step: int, generator=gen, stream=train_stream):
        width = cfg.widths[int(torch.randint(0, len(cfg.widths), (1,), generator=generator))]
        return make_dual_mode_batch(windows(stream, cfg.seq_len, cfg.batch_size, generator), width=width,
                                    n_blocks=cfg.n_blocks, mask_token_id=mask_id, generator=generator,
                                    p_full=cfg.p_full, p_branch=0.25, decay=cfg.decay)

    adapter_eval = [block_batch(0, eval_gen, heldout_stream) for _ in range(4)]
    adapter_started = time.perf_counter()
    adapter_resume = stage_resume("lora", key, "proposal LoRA", [gen]) if key else None
    history += fit(peft_model, block_batch, lambda model, batch: adapter_loss(model, batch, cfg.teacher_weight),
                   steps=cfg.steps, lr=cfg.lr, eval_batches=adapter_eval, eval_every=cfg.eval_every,
                   label="proposal LoRA", progress=progress, resume=adapter_resume)
    adapter_seconds = (time.perf_counter() - adapter_started
                       + (adapter_resume.restored_seconds if adapter_resume else 0.0))    # + before this process
    record = {"base_seconds": base_seconds, "adapter_seconds": adapter_seconds,
              "base_parameters": int(sum(p.numel() for p in ar_only.parameters())),
              "adapter_parameters": int(sum(p.numel() for p in peft_model.parameters() if p.requires_grad)),
              "lora": asdict(cfg), "model_config": asdict(model_config), "data": data_fingerprint(train_config),
              "key": lora_key(preset)}
    with checkpoint_writer(path) as tmp:
        ar_only.save_pretrained(tmp / "base")
        tokenizer.save_pretrained(tmp / "base")
        peft_model.save_pretrained(tmp / "adapter")
        pd.DataFrame(history).to_csv(tmp / "history.csv", index=False)
        (tmp / "record.json").write_text(json.dumps(record, indent=2))
    return Path(path)


def load(path: Path) -> TrainedLoRA:
    """The AR base (plain transformers model, local files only), its tokenizer and the adapter path."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path)
    base = AutoModelForCausalLM.from_pretrained(path / "base", local_files_only=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(path / "base", local_files_only=True)
    return TrainedLoRA(base, tokenizer, path / "adapter", pd.read_csv(path / "history.csv"),
                       json.loads((path / "record.json").read_text()))


def load_or_train(preset: str, progress: bool = True) -> TrainedLoRA:
    """The cached AR base + adapter of ``preset``, training them when missing."""
    path = checkpoint_dir("lora", lora_key(preset))
    if not (path / "record.json").exists():
        train(preset, path, progress, key=path.name)
        finish_partial("lora", path.name)
    return load(path)
