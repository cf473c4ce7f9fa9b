"""Training DFlash and DEdit drafters against the frozen cpu target: the pipeline and its cache.

Reference: seed 002 (DEdit), Sec. 3-4: DFlash (one pass from masks) and DEdit (the same
network trained jointly on its first pass and an editing pass fed ProposalMix inputs) on the
same backbone, data and steps; the objectives are in :mod:`spec_lib.training.block_edit`.

:func:`train_block_drafters` (one :class:`DEditConfig`):

1. the target is the self-speculative model of :mod:`spec_lib.training.self_speculative` in
   AR mode, frozen (the target DEER uses);
2. :func:`teacher_set`: corpus windows continued greedily by the target
   (:func:`spec_lib.training.teacher_sets.teacher_set`, shared with DEER where the sizes agree);
3. one :class:`~spec_lib.drafters.feature_block.FeatureBlockDrafter` per entry of
   ``config.variants`` (:data:`VARIANTS`), each from the same initial weights, batches and
   steps; features come from the frozen target per batch;
4. window expansion (seed 002, Sec. 4): each ``config.expansions`` entry continues a trained
   variant at a larger block size W' with gamma = W'/2 - 1.

:func:`save_block_drafters` writes ``artifacts/dedit/<key>/<variant>/`` (``save_pretrained``)
with ``history.csv`` and ``record.json``; the key hashes the config, the target's checkpoint
key and the source of every module this pipeline imports (decoding code is not among them:
:mod:`spec_lib.training.block_drafters` loads the checkpoints for decoding).  Training resumes
from the last save: each network's stage saves its state under ``artifacts/dedit/<key>.partial/``.
"""

from __future__ import annotations

import copy
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
import torch

from ..drafters.feature_block import FeatureBlockDrafter, build_feature_block_drafter
from . import block_edit, teacher_sets
from .cache import cache_key, checkpoint_dir, save_networks, stage_resume
from .loop import fit
from .presets import PRESETS
from .self_speculative import checkpoint_key, load_or_train

PIPELINE = "spec_lib.training.dedit"

#: variant -> keyword arguments of :func:`block_edit.dedit_loss` (None: DFlash's unmask loss only).
VARIANTS: dict[str, dict | None] = {
    "dflash": None,
    "dedit": {"joint": True, "mix": True},
    "dedit_no_mix": {"joint": True, "mix": False},
    "dedit_no_joint": {"joint": False, "mix": True},
    "dedit_no_both": {"joint": False, "mix": False},
    "dedit_low": {"joint": True, "mix": True, "select": "low"},
}


@dataclass(frozen=True)
class DEditConfig:
    """Drafter architecture, teacher data and training schedule (one per preset)."""

    target_preset: str = "cpu"
    num_layers: int = 2                 # drafter layers (DFlash: 5 on an 8B target)
    n_features: int = 3                 # target layers read as context
    width: int = 16                     # W: anchor + W - 1 drafted slots
    gamma: float = 7.0                  # seed 002: 7 at W = 16
    teacher_prompts: int = 1536
    heldout_prompts: int = 32
    prompt_len: int = 160
    answer_len: int = 96
    n_anchors: int = 16                 # anchors per sequence per step
    batch_size: int = 8
    steps: int = 750
    lr: float = 1e-3
    warmup: int = 50
    eval_every: int = 100
    eta: float = 0.5                    # ProposalMix threshold (or fraction)
    select: str = "high"                # ProposalMix: confident slots get ground truth
    rule: str = "threshold"
    variants: tuple[str, ...] = ("dflash", "dedit", "dedit_no_mix")
    #: window expansion (seed 002, Sec. 4): (variant, W') continues the W-trained variant at
    #: block size W' with gamma = W'/2 - 1 for ``expansion_steps`` steps; saved as ``<variant>_w<W'>``.
    expansions: tuple[tuple[str, int], ...] = (("dflash", 32), ("dedit", 24), ("dedit", 32))
    expansion_steps: int = 150
    seed: int = 0
    max_files: int | None = None




def network_names(config: DEditConfig) -> list[str]:
    """Every network the pipeline saves: the variants, then the window expansions."""
    return [*config.variants, *(f"{name}_w{width}" for name, width in config.expansions)]


def dedit_cache_key(config: DEditConfig) -> str:
    return cache_key(PIPELINE, config=asdict(config), target=checkpoint_key(*PRESETS[config.target_preset]))


def _check(config: DEditConfig) -> None:
    if not isinstance(config, DEditConfig):
        raise TypeError(f"config must be a DEditConfig, got {type(config).__name__}")
    if config.target_preset not in PRESETS:
        raise ValueError(f"target_preset must be one of {list(PRESETS)}, got {config.target_preset!r}")
    unknown = [v for v in config.variants if v not in VARIANTS]
    if unknown or not config.variants:
        raise ValueError(f"variants must be a non-empty subset of {list(VARIANTS)}, got {list(config.variants)}")
    for name, width in config.expansions:
        if name not in config.variants or not isinstance(width, int) or not config.width < width <= config.answer_len:
            raise ValueError(f"expansions must be (variant in {list(config.variants)}, W' with {config.width} < W' <= "
                             f"answer_len {config.answer_len}), got {(name, width)!r}")


def load_target(preset: str, progress: bool = True):
    """The frozen self-speculative model of ``preset`` (trained on first use)."""
    target = load_or_train(*PRESETS[preset], progress=progress)
    for p in target.hf_model.parameters():
        p.requires_grad_(False)
    return target


def teacher_set(config: DEditConfig, target, progress: bool = True) -> dict[str, torch.Tensor]:
    """Train / held-out prompts and the target's greedy answers
    (:func:`spec_lib.training.teacher_sets.teacher_set`, cached by target and sizes)."""
    stream, heldout = teacher_sets.corpus_streams(config.target_preset, target.tokenizer, config.max_files)
    return teacher_sets.teacher_set(config, target.hf_model, target.tokenizer, stream, heldout, progress)


def replace_block_size(config, width: int):
    """A copy of a :class:`~spec_lib.drafters.feature_block.FeatureBlockConfig` at block size ``width``."""
    copied = copy.deepcopy(config)
    copied.block_size = int(width)
    return copied


@torch.no_grad()
def target_features(hf_model, sequences: torch.Tensor, layer_ids: list[int]) -> torch.Tensor:
    """``(B, L, n_features * H)``: the frozen target's hidden states after ``layer_ids``."""
    hidden = hf_model(input_ids=sequences, output_hidden_states=True, use_cache=False).hidden_states
    return torch.cat([hidden[i + 1] for i in layer_ids], dim=-1)


def anchor_batch(config: DEditConfig, hf_model, layer_ids, prompts, answers, mask_token_id: int,
                 generator: torch.Generator, width: int | None = None) -> block_edit.AnchorBatch:
    """Features and sampled anchor blocks of width ``width`` (default ``config.width``) of
    teacher rows (prompt + answer, answer supervised)."""
    sequences = torch.cat([prompts, answers], dim=1)
    loss_mask = torch.zeros_like(sequences, dtype=torch.bool)
    loss_mask[:, prompts.shape[1]:] = True
    parts = block_edit.sample_anchors(sequences, loss_mask, n_anchors=config.n_anchors, width=width or config.width,
                                      mask_token_id=mask_token_id, generator=generator)
    return block_edit.AnchorBatch(target_features(hf_model, sequences, layer_ids), *parts)


def train_block_drafters(config: DEditConfig, progress: bool = True, key: str = "") -> tuple[dict, pd.DataFrame, dict]:
    """Every variant of ``config.variants``, from the same initial weights, batches and steps; with
    the checkpoint ``key``, each network resumes from its last save."""
    _check(config)
    started = time.perf_counter()
    target = load_target(config.target_preset, progress)
    teacher = teacher_set(config, target, progress)
    hf_model, mask_id = target.hf_model.eval(), target.tokenizer.mask_token_id
    embed, head = hf_model.get_input_embeddings(), hf_model.get_output_embeddings()
    initial = build_feature_block_drafter(hf_model.config, num_layers=config.num_layers, n_features=config.n_features,
                                          block_size=config.width, mask_token_id=mask_id, seed=config.seed)
    layer_ids = list(initial.config.target_layer_ids)
    networks, history, eval_sets, restored = {}, [], {}, []

    def held_out(width: int) -> list:
        """The held-out anchor batches at ``width`` (target features included), built once."""
        if width not in eval_sets:
            eval_gen = torch.Generator().manual_seed(config.seed + 1)
            eval_sets[width] = [anchor_batch(config, hf_model, layer_ids,
                                             teacher["heldout_prompts"][i: i + config.batch_size],
                                             teacher["heldout_answers"][i: i + config.batch_size], mask_id, eval_gen,
                                             width)
                                for i in range(0, config.heldout_prompts, config.batch_size)]
        return eval_sets[width]

    def train(name: str, network, width: int, steps: int, label: str) -> None:
        """``steps`` of variant ``name``'s loss at block size ``width`` (the same batches for every
        network trained at that width)."""
        gen = torch.Generator().manual_seed(config.seed)
        eval_batches = held_out(width)
        weights = block_edit.position_weights(width, config.gamma if width == config.width
                                              else block_edit.gamma_for(width))
        options = VARIANTS[name]

        def make_batch(step):
            pick = torch.randint(0, teacher["prompts"].shape[0], (config.batch_size,), generator=gen)
            return anchor_batch(config, hf_model, layer_ids, teacher["prompts"][pick], teacher["answers"][pick],
                                mask_id, gen, width)

        def loss_fn(model, batch):
            if options is None:
                return block_edit.unmask_loss(model, embed, head, batch, weights)
            return block_edit.dedit_loss(model, embed, head, batch, weights, eta=config.eta,
                                         **{"select": config.select, "rule": config.rule, **options})

        torch.manual_seed(config.seed)
        resume = stage_resume("dedit", key, label, [gen]) if key else None
        history.extend(fit(network, make_batch, loss_fn, steps=steps, lr=config.lr, warmup=config.warmup,
                           eval_batches=eval_batches, eval_every=config.eval_every, label=label, progress=progress,
                           resume=resume))
        restored.append(resume.restored_seconds if resume else 0.0)     # trained before this process
        networks[label] = network.eval()

    for name in config.variants:
        network = FeatureBlockDrafter(initial.config)
        network.load_state_dict(initial.state_dict())
        train(name, network, config.width, config.steps, name)
    for name, width in config.expansions:                       # window expansion from the W-trained weights
        network = FeatureBlockDrafter(replace_block_size(initial.config, width))
        network.load_state_dict(networks[name].state_dict())
        train(name, network, width, config.expansion_steps, f"{name}_w{width}")
    record = {"train_seconds": time.perf_counter() - started + sum(restored),
              "teacher_seconds": float(teacher["seconds"]),
              "teacher_rows": int(teacher["prompts"].shape[0]), "teacher_tokens": int(teacher["answers"].numel()),
              "drafter_parameters": int(sum(p.numel() for p in initial.parameters())),
              "target_parameters": int(sum(p.numel() for p in hf_model.parameters())), "layer_ids": layer_ids,
              "config": asdict(config), "networks": network_names(config),
              "target_checkpoint_key": checkpoint_key(*PRESETS[config.target_preset]),
              "checkpoint_key": dedit_cache_key(config)}
    return networks, pd.DataFrame(history).rename(columns={"stage": "model"}), record


def saved_at(config: DEditConfig) -> Path:
    """Where the drafters of ``config`` are (or will be) cached."""
    return checkpoint_dir("dedit", dedit_cache_key(config))


def save_block_drafters(config: DEditConfig, progress: bool = True) -> Path:
    """Train ``config``'s drafters unless cached; the checkpoint directory (written atomically)."""
    return save_networks("dedit", dedit_cache_key(config), lambda key: train_block_drafters(config, progress, key=key))
