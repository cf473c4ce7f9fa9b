"""Training Medusa, Hydra and EAGLE-3 on DFlash's teacher data and steps (seed 001's baselines).

Reference: seed 001 (DEER), Sec. 4 compares DEER with Medusa, Hydra and EAGLE-3; here they
are trained on the same target, teacher set (the target's own greedy answers), batch size,
steps and learning rate as DFlash (:mod:`spec_lib.training.dedit`), so the comparison differs
only in the drafter.  The objectives (:mod:`spec_lib.drafters.feature_heads` for the networks):

* **Medusa**: at an answer row t, head i's cross-entropy to x_{t+1+i} from h_t, the target's
  last-layer output (Medusa-1: the target frozen, the heads trained on its own text, which
  is Medusa-2's self-distillation data);
* **Hydra**: the same, head i also reading the true x_{t+1}..x_{t+i} (teacher forcing);
* **EAGLE-3**: the training-time test, :meth:`~spec_lib.drafters.feature_heads.Eagle3Network.unrolled`
  to ``ttt_depth``: at depth s the drafter reads its own outputs in place of the target's
  features for the s rows after the verified one, each depth's cross-entropy to x_{j+2}.

Each head i (each depth s) weighs ``head_decay ** i`` (Medusa's lambda_i = 0.8^i); the
weighted cross-entropies are averaged over the rows that have a label.  Anchor rows t (the
verified row a chain starts from) are drawn from the answer, ``dedit.n_anchors`` per
sequence, with DFlash's generator seed.  Checkpoints are cached under
``artifacts/feature_heads/<key>/<kind>/``; the key hashes the config, the target's checkpoint
key and this pipeline's import closure.  Training resumes from the last save (each kind's
stage saves its state under ``artifacts/feature_heads/<key>.partial/``).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import pandas as pd
import torch
import torch.nn.functional as F

from ..drafters.feature_block import target_layer_ids
from ..drafters.feature_heads import build_eagle3, build_feature_heads
from .block_edit import IGNORE
from .cache import cache_key, save_networks, stage_resume
from .dedit import DEditConfig, load_target, target_features, teacher_set
from .loop import fit
from .presets import PRESETS
from .self_speculative import checkpoint_key

PIPELINE = "spec_lib.training.feature_heads"
KINDS = ("medusa", "hydra", "eagle3")


@dataclass(frozen=True)
class FeatureHeadsConfig:
    """The drafters' own settings; data, batch, steps and rate come from ``dedit`` (DFlash's)."""

    dedit: DEditConfig = field(default_factory=DEditConfig)
    kinds: tuple[str, ...] = KINDS
    num_heads: int = 0                  # Medusa / Hydra heads; 0: dedit.width - 1, DFlash's k
    head_decay: float = 0.8             # weight of head i (depth s): head_decay ** i
    ttt_depth: int = 4                  # EAGLE-3's training-time test depth (EAGLE-3: 7)
    seed: int = 1                       # the drafters' initial weights

    @property
    def heads(self) -> int:
        return self.num_heads or self.dedit.width - 1


@dataclass
class FeatureBatch:
    """Teacher rows and the anchors drafted from.

    Attributes:
        features: ``(B, L, F)`` the target's features: its last layer (Medusa, Hydra) or the
            fused layers (EAGLE-3).
        sequences: ``(B, L)`` prompt + answer.
        anchors: ``(B, A)`` rows t, each the verified row a chain of drafts starts after.
        labels: ``(B, A, k)`` x_{t+1+i} for i = 1..k (IGNORE past the sequence).
    """

    features: torch.Tensor
    sequences: torch.Tensor
    anchors: torch.Tensor
    labels: torch.Tensor


def _check(config: FeatureHeadsConfig) -> None:
    if not isinstance(config, FeatureHeadsConfig):
        raise TypeError(f"config must be a FeatureHeadsConfig, got {type(config).__name__}")
    if not isinstance(config.dedit, DEditConfig):
        raise TypeError(f"config.dedit must be a DEditConfig, got {type(config.dedit).__name__}")
    if not config.kinds or any(k not in KINDS for k in config.kinds) or len(set(config.kinds)) < len(config.kinds):
        raise ValueError(f"kinds must be distinct entries of {list(KINDS)}, got {list(config.kinds)}")
    if isinstance(config.num_heads, bool) or not isinstance(config.num_heads, int) \
            or not 0 <= config.num_heads < config.dedit.answer_len:
        raise ValueError(f"num_heads must be an int in [0, {config.dedit.answer_len}) (0: dedit.width - 1), "
                         f"got {config.num_heads!r}")
    if not 0 < config.head_decay <= 1:
        raise ValueError(f"head_decay must be in (0, 1], got {config.head_decay!r}")
    if isinstance(config.ttt_depth, bool) or not isinstance(config.ttt_depth, int) \
            or not 1 <= config.ttt_depth < config.dedit.answer_len:
        raise ValueError(f"ttt_depth must be an int in [1, {config.dedit.answer_len}), got {config.ttt_depth!r}")


def feature_heads_cache_key(config: FeatureHeadsConfig) -> str:
    return cache_key(PIPELINE, config=asdict(config), target=checkpoint_key(*PRESETS[config.dedit.target_preset]))


def feature_batch(hf_model, layer_ids: list[int], prompts: torch.Tensor, answers: torch.Tensor, n_anchors: int,
                  heads: int, generator: torch.Generator) -> FeatureBatch:
    """Features at ``layer_ids`` and ``n_anchors`` answer rows per sequence (the first is the
    prompt's last row, whose output is the first answer token's prediction)."""
    sequences = torch.cat([prompts, answers], dim=1)
    length, first = sequences.shape[1], prompts.shape[1] - 1
    anchors = torch.randint(first, length - 1, (sequences.shape[0], n_anchors), generator=generator)
    offsets = torch.arange(2, heads + 2)
    where = anchors[..., None] + offsets                                    # x_{t+1+i}, i = 1..k
    labels = sequences.gather(1, where.clamp(max=length - 1).flatten(1)).view_as(where)
    labels = labels.masked_fill(where >= length, IGNORE)
    return FeatureBatch(target_features(hf_model, sequences, layer_ids), sequences, anchors, labels)


def _weighted_ce(logits: torch.Tensor, labels: torch.Tensor, decay: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The head-weighted mean CE over labelled slots, and the per-head CE (``(..., k, V)`` logits)."""
    k = labels.shape[-1]
    ce = F.cross_entropy(logits.flatten(0, -2).float(), labels.flatten(), ignore_index=IGNORE,
                         reduction="none").view(labels.shape)
    labelled = (labels != IGNORE).float()
    weights = decay ** torch.arange(k, dtype=torch.float32) * labelled
    per_head = (ce.detach() * labelled).flatten(0, -2).sum(0) / labelled.flatten(0, -2).sum(0).clamp(min=1)
    return (ce * weights).sum() / weights.sum().clamp(min=1e-8), per_head


def _log(loss, per_head, logits, labels) -> dict:
    supervised = labels != IGNORE
    hits = (logits.detach().argmax(-1) == labels) & supervised
    return {"objective": float(loss.detach()), "ce_first": float(per_head[0]), "ce_last": float(per_head[-1]),
            "accuracy_first": float(hits[..., 0].sum() / supervised[..., 0].sum().clamp(min=1)),
            "accuracy": float(hits.sum() / supervised.sum().clamp(min=1))}


def heads_loss(network, embed, head, batch: FeatureBatch, decay: float) -> tuple[torch.Tensor, dict]:
    """Medusa's (or teacher-forced Hydra's) weighted CE of every head at the anchors."""
    k = network.config.num_heads
    h = batch.features.gather(1, batch.anchors[..., None].expand(-1, -1, batch.features.shape[-1]))
    embeds = None
    if network.config.kind == "hydra":                    # E(x_{t+1}) .. E(x_{t+k}), true tokens
        where = (batch.anchors[..., None] + torch.arange(1, k + 1)).clamp(max=batch.sequences.shape[1] - 1)
        embeds = embed(batch.sequences.gather(1, where.flatten(1)).view_as(where))
    logits = head(network(h, embeds))
    loss, per_head = _weighted_ce(logits, batch.labels, decay)
    return loss, _log(loss, per_head, logits, batch.labels)


def eagle3_loss(network, embed, head, batch: FeatureBatch, depth: int, decay: float) -> tuple[torch.Tensor, dict]:
    """The training-time test's weighted CE: at depth s, row t + s of the chain from each
    anchor t predicts x_{t+s+2} (= ``labels[..., s]``)."""
    sequences = batch.sequences
    next_tokens = torch.cat([sequences[:, 1:], sequences[:, -1:]], dim=1)        # x_{j+1} at row j (last: unused)
    normed = network.unrolled(batch.features, embed(next_tokens), depth)          # (B, depth, L, H)
    rows = (batch.anchors[:, None, :] + torch.arange(depth)[None, :, None]).clamp(max=sequences.shape[1] - 1)
    picked = normed.gather(2, rows[..., None].expand(-1, -1, -1, normed.shape[-1]))   # (B, depth, A, H)
    logits = head(picked.transpose(1, 2))                                         # (B, A, depth, V)
    labels = batch.labels[..., :depth]
    loss, per_depth = _weighted_ce(logits, labels, decay)
    return loss, _log(loss, per_depth, logits, labels)


def train_feature_heads(config: FeatureHeadsConfig, progress: bool = True, key: str = ""
                        ) -> tuple[dict, pd.DataFrame, dict]:
    """Every drafter of ``config.kinds`` on DFlash's teacher set, batches and steps; with the
    checkpoint ``key``, each resumes from its last save."""
    _check(config)
    d = config.dedit
    started = time.perf_counter()
    target = load_target(d.target_preset, progress)
    teacher = teacher_set(d, target, progress)
    hf_model = target.hf_model.eval()
    embed, head = hf_model.get_input_embeddings(), hf_model.get_output_embeddings()
    layers = int(hf_model.config.num_hidden_layers)
    networks, history, restored = {}, [], []
    for kind in config.kinds:
        if kind == "eagle3":
            layer_ids = target_layer_ids(layers, d.n_features)
            network, labels_needed = build_eagle3(hf_model.config, layer_ids, seed=config.seed), config.ttt_depth

            def loss_fn(model, batch):
                return eagle3_loss(model, embed, head, batch, config.ttt_depth, config.head_decay)
        else:
            layer_ids = [layers - 1]
            network, labels_needed = build_feature_heads(hf_model.config, kind, num_heads=config.heads,
                                                         seed=config.seed), config.heads

            def loss_fn(model, batch):
                return heads_loss(model, embed, head, batch, config.head_decay)

        def batch_of(prompts, answers, generator, layer_ids=layer_ids, labels_needed=labels_needed):
            return feature_batch(hf_model, layer_ids, prompts, answers, d.n_anchors, labels_needed, generator)

        eval_gen = torch.Generator().manual_seed(d.seed + 1)
        eval_batches = [batch_of(teacher["heldout_prompts"][i: i + d.batch_size],
                                 teacher["heldout_answers"][i: i + d.batch_size], eval_gen)
                        for i in range(0, d.heldout_prompts, d.batch_size)]
        gen = torch.Generator().manual_seed(d.seed)

        def make_batch(step, gen=gen, batch_of=batch_of):
            pick = torch.randint(0, teacher["prompts"].shape[0], (d.batch_size,), generator=gen)
            return batch_of(teacher["prompts"][pick], teacher["answers"][pick], gen)

        torch.manual_seed(d.seed)
        resume = stage_resume("feature_heads", key, kind, [gen]) if key else None
        history.extend(fit(network.train(), make_batch, loss_fn, steps=d.steps, lr=d.lr, warmup=d.warmup,
                           eval_batches=eval_batches, eval_every=d.eval_every, label=kind, progress=progress,
                           resume=resume))
        restored.append(resume.restored_seconds if resume else 0.0)
        networks[kind] = network.eval()
    record = {"train_seconds": time.perf_counter() - started + sum(restored),
              "parameters": {k: int(sum(p.numel() for p in n.parameters())) for k, n in networks.items()},
              "config": asdict(config), "networks": list(config.kinds),
              "target_checkpoint_key": checkpoint_key(*PRESETS[d.target_preset]),
              "checkpoint_key": feature_heads_cache_key(config)}
    return networks, pd.DataFrame(history).rename(columns={"stage": "model"}), record


def save_feature_heads(config: FeatureHeadsConfig, progress: bool = True):
    """Train ``config``'s drafters unless cached; the checkpoint directory (written atomically)."""
    return save_networks("feature_heads", feature_heads_cache_key(config),
                         lambda key: train_feature_heads(config, progress, key=key))
