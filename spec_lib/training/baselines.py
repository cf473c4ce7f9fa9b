"""Training the Domino and DSpark baselines on DFlash's backbone, data and steps (seed 002).

Reference: seed 002 (DEdit), Sec. 5: DEdit is compared with DFlash, Domino and DSpark "on
the same backbone"; "Domino and DSpark draft W candidates, DFlash and DEdit W - 1".  The
objectives are the public implementations' (the project's research notes, Sec. 3.2-3.3):

* both heads put the anchor in the first prediction slot: a block of W rows
  ``[x_a, MASK x (W - 1)]``, slot j predicting x_{a+j+1}, weights w_j = exp(-j / gamma)
  (SpecForge's offset 0 under ``shift_label``);
* **Domino**: ``(1 - lambda) CE_w(final) + lambda CE_w(base)``, lambda decaying linearly from 1
  to 0 over the first ``lambda_decay`` share of the steps, the GRU teacher-forced on the
  true block tokens;
* **DSpark**: ``ce_weight CE_w + l1_weight L1_w(p_draft, p_target) + conf_weight
  BCE_w(c, 1 - TV)`` with L1 = sum_v |p_draft - p_target| = 2 TV (seed 002, App. B.2: "CE and
  L1 losses with weights 0.1 and 0.9"; confidence weight 1.0), the Markov head teacher-forced, the target
  distribution p_target being the frozen target's softmax at the slot's position, and the
  confidence target detached.

:func:`train_baselines` starts every head's backbone from the *same* initial weights as
DFlash's (:func:`spec_lib.training.dedit.train_block_drafters`, ``seed``), draws batches
from the same teacher set with the same generator seed, and runs the same number of steps
at the same learning rate; only the heads' own weights are new (seeded ``head_seed``).
Window expansion (seed 002, Sec. 4 and Table 2(a), which runs Domino at W = 16 and 32 as
well): each ``config.expansions`` entry ``(kind, W')`` continues the trained W head at block
size W' with gamma = W'/2 - 1 for the DEdit preset's ``expansion_steps``, exactly as DEdit's
and DFlash's expansions do (:mod:`spec_lib.training.dedit`), saved as ``<kind>_w<W'>``.
Checkpoints are cached under ``artifacts/baselines/<key>/<name>/``; the key hashes the
config, the target's checkpoint key and this pipeline's import closure.  Training resumes from
the last save: each head's stage saves its state under ``artifacts/baselines/<key>.partial/``.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import pandas as pd
import torch
import torch.nn.functional as F

from ..drafters.domino import DominoConfig, DominoNetwork
from ..drafters.dspark import DSparkConfig, DSparkNetwork
from ..drafters.feature_block import build_feature_block_drafter
from . import block_edit
from .block_edit import IGNORE, AnchorBatch, gamma_for, weighted_ce
from .cache import cache_key, save_networks, stage_resume
from .dedit import DEditConfig, load_target, replace_block_size, teacher_set
from .loop import fit
from .presets import PRESETS
from .self_speculative import checkpoint_key

PIPELINE = "spec_lib.training.baselines"
KINDS = ("domino", "dspark")


@dataclass(frozen=True)
class BaselineConfig:
    """The heads' own settings; data, backbone, W, gamma, steps and rate come from ``dedit``."""

    dedit: DEditConfig = field(default_factory=DEditConfig)
    kinds: tuple[str, ...] = KINDS
    gru_hidden: int = 128               # Domino's GRU state (SpecForge: 1024 at d = 4096)
    mlp_hidden: int = 128               # Domino's MLP inner width (SpecForge: 256)
    suffix_start: int = 1               # Domino corrects slots >= this (SpecForge: pure_draft_prefix_len = 1)
    lambda_decay: float = 0.5           # Domino's lambda reaches 0 after this share of the steps
    markov_rank: int = 64               # DSpark's Markov head rank (DeepSpec: 256 at V = 151k)
    ce_weight: float = 0.1              # DSpark's loss mix (DeepSpec's defaults)
    l1_weight: float = 0.9              # on L1 = 2 TV (seed 002, App. B.2)
    conf_weight: float = 1.0
    head_seed: int = 1
    #: window expansion: (kind, W') continues the W-trained head at block size W' (gamma = W'/2 - 1)
    #: for ``dedit.expansion_steps`` steps; saved as ``<kind>_w<W'>``.
    expansions: tuple[tuple[str, int], ...] = (("domino", 32),)


@dataclass
class ShiftedBatch(AnchorBatch):
    """An :class:`AnchorBatch` with the anchor as the first prediction slot.

    Attributes (besides the parent's, now W slots per block, slot j labelled x_{a+j+1}):
        prev_tokens: ``(B, A, W)`` the true tokens x_a..x_{a+W-1} the heads are forced on.
        target_probs: ``(B, A, W, V)`` the frozen target's next-token distribution at a+j
            (DSpark), or None.
        lam: Domino's lambda at this step.
    """

    prev_tokens: torch.Tensor | None = None
    target_probs: torch.Tensor | None = None
    lam: float = 0.0


def _check(config: BaselineConfig) -> None:
    if not isinstance(config, BaselineConfig):
        raise TypeError(f"config must be a BaselineConfig, got {type(config).__name__}")
    if not isinstance(config.dedit, DEditConfig):
        raise TypeError(f"config.dedit must be a DEditConfig, got {type(config.dedit).__name__}")
    if not config.kinds or any(k not in KINDS for k in config.kinds):
        raise ValueError(f"kinds must be a non-empty subset of {list(KINDS)}, got {list(config.kinds)}")
    if not 0 < config.lambda_decay <= 1:
        raise ValueError(f"lambda_decay must be in (0, 1], got {config.lambda_decay!r}")
    for name in ("gru_hidden", "mlp_hidden", "markov_rank"):
        if getattr(config, name) < 1:
            raise ValueError(f"{name} must be >= 1, got {getattr(config, name)!r}")
    d = config.dedit
    for kind, width in config.expansions:
        if kind not in config.kinds or not isinstance(width, int) or not d.width < width <= d.answer_len:
            raise ValueError(f"expansions must be (kind in {list(config.kinds)}, W' with {d.width} < W' <= "
                             f"answer_len {d.answer_len}), got {(kind, width)!r}")


def network_names(config: BaselineConfig) -> list[str]:
    """The saved networks of ``config``: its kinds, then ``<kind>_w<W'>`` per expansion."""
    return [*config.kinds, *(f"{kind}_w{width}" for kind, width in config.expansions)]


def baseline_cache_key(config: BaselineConfig) -> str:
    return cache_key(PIPELINE, config=asdict(config), target=checkpoint_key(*PRESETS[config.dedit.target_preset]))


def shifted_batch(config: BaselineConfig, hf_model, layer_ids, prompts, answers, mask_token_id: int,
                  generator: torch.Generator, with_target: bool, width: int | None = None) -> ShiftedBatch:
    """Anchor blocks of W rows (``width``, default ``config.dedit.width``) whose slot j is
    labelled x_{a+j+1}: drawn as DFlash's blocks of W + 1
    (:func:`spec_lib.training.block_edit.sample_anchors`), with each block's last row dropped
    and the labels moved one slot left."""
    width = width or config.dedit.width
    sequences = torch.cat([prompts, answers], dim=1)
    loss_mask = torch.zeros_like(sequences, dtype=torch.bool)
    loss_mask[:, prompts.shape[1]:] = True
    anchors, block, labels, positions, mask = block_edit.sample_anchors(
        sequences, loss_mask, n_anchors=config.dedit.n_anchors, width=width + 1, mask_token_id=mask_token_id,
        generator=generator)
    with torch.no_grad():
        out = hf_model(input_ids=sequences, output_hidden_states=True, use_cache=False)
    features = torch.cat([out.hidden_states[i + 1] for i in layer_ids], dim=-1)
    batch_size, n_anchor = anchors.shape
    length = sequences.shape[1]
    slot = torch.arange(n_anchor * (width + 1)) % (width + 1)
    rows = (slot < width).nonzero()[:, 0]                                  # every block row but the last
    mask = mask[:, :, rows][..., torch.cat([torch.arange(length), length + rows])]
    positions = positions[:, rows]
    labels = labels[..., 1:]
    prev = torch.cat([block[..., :1], labels[..., :-1].clamp(min=0)], dim=-1)   # ignored slots: any token
    target_probs = None
    if with_target:
        gathered = out.logits.gather(1, positions[..., None].expand(-1, -1, out.logits.shape[-1]))
        target_probs = gathered.float().softmax(-1).view(batch_size, n_anchor, width, -1)
    return ShiftedBatch(features, anchors, block[..., :width], labels, positions, mask, prev, target_probs)


def shifted_weights(width: int, gamma: float) -> torch.Tensor:
    """``(W,)`` w_j = exp(-j / gamma): every slot is a prediction slot."""
    if not gamma > 0:
        raise ValueError(f"gamma must be > 0, got {gamma!r}")
    return torch.exp(-torch.arange(width, dtype=torch.float32) / gamma)


def backbone(network, embed, head, batch: ShiftedBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """``(base logits (B, A, W, V), hidden (B, A, W, H))`` of the backbone's one pass."""
    batch_size, length = batch.features.shape[:2]
    context_positions = torch.arange(length, device=batch.block.device)[None].expand(batch_size, -1)
    kv = network.context_kv(batch.features, context_positions)
    hidden = network(embed(batch.block.flatten(1)), batch.positions, kv, attention_mask=batch.mask)
    hidden = hidden.view(*batch.block.shape, -1)
    return head(hidden), hidden


def _weighted_mean(values: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    w = weights.expand_as(labels) * (labels != IGNORE)
    return (values * w).sum() / w.sum().clamp(min=1e-8)


def _accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    supervised = labels != IGNORE
    return float(((logits.detach().argmax(-1) == labels) & supervised).sum() / supervised.sum().clamp(min=1))


def domino_loss(network: DominoNetwork, embed, head, batch: ShiftedBatch, weights: torch.Tensor
                ) -> tuple[torch.Tensor, dict]:
    """``(1 - lambda) CE_w(final) + lambda CE_w(base)``; logs both CEs and accuracies."""
    base, hidden = backbone(network, embed, head, batch)
    final = network.teacher_forced(base, hidden, embed(batch.prev_tokens))
    final_ce, base_ce = weighted_ce(final, batch.labels, weights), weighted_ce(base, batch.labels, weights)
    loss = (1 - batch.lam) * final_ce + batch.lam * base_ce
    return loss, {"objective": float(loss.detach()), "final_ce": float(final_ce.detach()), "base_ce": float(base_ce.detach()),
                  "accuracy": _accuracy(final, batch.labels), "base_accuracy": _accuracy(base, batch.labels),
                  "lambda": float(batch.lam)}


def dspark_loss(network: DSparkNetwork, embed, head, batch: ShiftedBatch, weights: torch.Tensor, *,
                ce_weight: float, l1_weight: float, conf_weight: float) -> tuple[torch.Tensor, dict]:
    """``ce_weight CE_w + l1_weight L1_w + conf_weight BCE_w(c, 1 - TV)``, L1 = 2 TV the distance of
    the draft's distribution to the target's, the confidence goal 1 - TV (the probability that
    rejection sampling accepts the slot's draft) detached."""
    if batch.target_probs is None:
        raise ValueError("dspark_loss needs batch.target_probs (build the batch with with_target=True)")
    base, hidden = backbone(network, embed, head, batch)
    logits, confidence = network.teacher_forced(base, hidden, batch.prev_tokens)
    tv = 0.5 * (logits.float().softmax(-1) - batch.target_probs).abs().sum(-1)
    ce = weighted_ce(logits, batch.labels, weights)
    l1_loss = _weighted_mean(2 * tv, batch.labels, weights)
    goal = (1 - tv).detach()
    bce = F.binary_cross_entropy_with_logits(confidence.float(), goal, reduction="none")
    conf_loss = _weighted_mean(bce, batch.labels, weights)
    loss = ce_weight * ce + l1_weight * l1_loss + conf_weight * conf_loss
    error = _weighted_mean((confidence.detach().float().sigmoid() - goal).abs(), batch.labels, weights)
    return loss, {"objective": float(loss.detach()), "ce": float(ce.detach()), "tv": float(l1_loss.detach()) / 2, "conf_bce": float(conf_loss.detach()),
                  "confidence_error": float(error), "accuracy": _accuracy(logits, batch.labels)}


def _network(kind: str, config: BaselineConfig, initial):
    """A head network of ``kind`` whose backbone holds ``initial``'s weights (heads seeded)."""
    base = initial.config.to_dict()
    for key in ("model_type", "architectures", "transformers_version"):
        base.pop(key, None)
    state = torch.random.get_rng_state()
    torch.manual_seed(config.head_seed)
    try:
        if kind == "domino":
            network = DominoNetwork(DominoConfig(gru_hidden=config.gru_hidden, mlp_hidden=config.mlp_hidden,
                                                 suffix_start=config.suffix_start, **base))
        else:
            network = DSparkNetwork(DSparkConfig(markov_rank=config.markov_rank, **base))
    finally:
        torch.random.set_rng_state(state)
    missing, unexpected = network.load_state_dict(initial.state_dict(), strict=False)
    heads = ("gru.", "mlp.") if kind == "domino" else ("markov_in.", "markov_out.", "confidence.")
    if unexpected or any(not k.startswith(heads) for k in missing):
        raise RuntimeError(f"backbone weights do not map onto the {kind} network: missing {missing}, "
                           f"unexpected {unexpected}")
    return network


def train_baselines(config: BaselineConfig, progress: bool = True, key: str = "") -> tuple[dict, pd.DataFrame, dict]:
    """Every head of ``config.kinds`` from DFlash's initial backbone, batches and steps; then
    every ``config.expansions`` entry from its trained head.  With the checkpoint ``key``, each
    head resumes from its last save."""
    _check(config)
    d = config.dedit
    started = time.perf_counter()
    target = load_target(d.target_preset, progress)
    teacher = teacher_set(d, target, progress)
    hf_model, mask_id = target.hf_model.eval(), target.tokenizer.mask_token_id
    embed, head = hf_model.get_input_embeddings(), hf_model.get_output_embeddings()
    initial = build_feature_block_drafter(hf_model.config, num_layers=d.num_layers, n_features=d.n_features,
                                          block_size=d.width, mask_token_id=mask_id, seed=d.seed)
    layer_ids = list(initial.config.target_layer_ids)
    networks, history, restored = {}, [], []

    def train(kind: str, network, width: int, steps: int, label: str) -> None:
        """``steps`` of ``kind``'s loss at block size ``width``: DFlash's batches (same seeds)."""
        with_target = kind == "dspark"
        weights = shifted_weights(width, d.gamma if width == d.width else gamma_for(width))
        eval_gen = torch.Generator().manual_seed(d.seed + 1)
        eval_batches = [shifted_batch(config, hf_model, layer_ids, teacher["heldout_prompts"][i: i + d.batch_size],
                                      teacher["heldout_answers"][i: i + d.batch_size], mask_id, eval_gen, with_target,
                                      width)
                        for i in range(0, d.heldout_prompts, d.batch_size)]
        gen = torch.Generator().manual_seed(d.seed)
        decay_steps = max(1.0, config.lambda_decay * steps)

        def make_batch(step):
            pick = torch.randint(0, teacher["prompts"].shape[0], (d.batch_size,), generator=gen)
            batch = shifted_batch(config, hf_model, layer_ids, teacher["prompts"][pick], teacher["answers"][pick],
                                  mask_id, gen, with_target, width)
            # an expansion continues the trained head, whose lambda has already reached 0
            batch.lam = max(0.0, 1.0 - step / decay_steps) if width == d.width else 0.0
            return batch

        if kind == "domino":
            def loss_fn(model, batch):
                return domino_loss(model, embed, head, batch, weights)
        else:
            def loss_fn(model, batch):
                return dspark_loss(model, embed, head, batch, weights, ce_weight=config.ce_weight,
                                   l1_weight=config.l1_weight, conf_weight=config.conf_weight)

        torch.manual_seed(d.seed)
        resume = stage_resume("baselines", key, label, [gen]) if key else None
        history.extend(fit(network, make_batch, loss_fn, steps=steps, lr=d.lr, warmup=d.warmup,
                           eval_batches=eval_batches, eval_every=d.eval_every, label=label, progress=progress,
                           resume=resume))
        restored.append(resume.restored_seconds if resume else 0.0)     # trained before this process
        networks[label] = network.eval()

    for kind in config.kinds:
        train(kind, _network(kind, config, initial), d.width, d.steps, kind)
    for kind, width in config.expansions:                       # window expansion from the W-trained head
        trained = networks[kind]
        network = type(trained)(replace_block_size(trained.config, width))
        network.load_state_dict(trained.state_dict())
        train(kind, network, width, d.expansion_steps, f"{kind}_w{width}")
    record = {"train_seconds": time.perf_counter() - started + sum(restored), "layer_ids": layer_ids,
              "parameters": {k: int(sum(p.numel() for p in n.parameters())) for k, n in networks.items()},
              "config": asdict(config), "networks": network_names(config),
              "target_checkpoint_key": checkpoint_key(*PRESETS[d.target_preset]),
              "checkpoint_key": baseline_cache_key(config)}
    return networks, pd.DataFrame(history).rename(columns={"stage": "model"}), record


def save_baselines(config: BaselineConfig, progress: bool = True):
    """Train ``config``'s heads unless cached; the checkpoint directory (written atomically)."""
    return save_networks("baselines", baseline_cache_key(config),
                         lambda key: train_baselines(config, progress, key=key))
