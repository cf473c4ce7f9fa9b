"""Table 2(b) of seed 002: editors trained on a frozen DFlash drafter's proposals.

Reference: seed 002 (DEdit), Sec. 4.2: "Table 2(b) holds the proposal fixed: a frozen DFlash
drafter supplies P1 for all variants, and a separate editor is trained for each.  With joint
training, this editor is trained with both L_unmask and L_edit; without it, the editor is
trained with L_edit only [...].  Without ProposalMix, the editor receives unmodified DFlash
proposals."  The editor is evaluated at P2 with W = 16.

Here the frozen proposer is a network of the DEdit pipeline (:mod:`spec_lib.training.dedit`,
``dflash`` by default, trained and cached there), and every editor starts from DFlash's
*initial* weights (:func:`spec_lib.training.drafter_setup.setup`) and sees the same batches and
steps.  :func:`frozen_edit_loss` is :func:`spec_lib.training.block_edit.dedit_loss` with P1
taken from the frozen proposer instead of the editor itself:

* P1 = the proposer's logits on ``[anchor, MASK x (W - 1)]`` (no gradient);
* the editor's input is ProposalMix's (``mix``: ground truth where P1 is confident) or P1's
  argmax, the anchor kept in slot 0;
* L_edit = the position-weighted CE of the editor's pass on that input; with ``joint`` the
  editor's own unmasking loss L_unmask (on ``[anchor, MASK ...]``) is added.

Checkpoints are cached under ``artifacts/frozen_editors/<key>/<variant>/``; the key hashes the
config, the proposer's pipeline key and this pipeline's import closure.  Training resumes from
the last save: each editor's stage saves its state under ``artifacts/frozen_editors/<key>.partial/``.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import pandas as pd
import torch

from ..drafters.feature_block import FeatureBlockDrafter
from . import block_edit
from .cache import cache_key, save_networks, stage_resume
from .dedit import DEditConfig, anchor_batch, dedit_cache_key, network_names, save_block_drafters
from .drafter_setup import setup
from .loop import fit

PIPELINE = "spec_lib.training.frozen_editors"

#: variant -> the :func:`frozen_edit_loss` switches: seed 002, Table 2(b)'s rows, then ProposalMix's
#: selection ablated (the paper states only "positions selected using first-pass confidence"):
#: the *low*-confidence slots get ground truth, or a fixed share (eta) of each block's most
#: confident slots instead of those above the threshold eta.  ``select`` / ``rule`` given here
#: override the DEdit config's.
VARIANTS: dict[str, dict] = {
    "full": {"joint": True, "mix": True},
    "no_mix": {"joint": True, "mix": False},
    "no_joint": {"joint": False, "mix": True},
    "no_both": {"joint": False, "mix": False},
    "select_low": {"joint": True, "mix": True, "select": "low"},
    "rule_fraction": {"joint": True, "mix": True, "rule": "fraction"},
}


@dataclass(frozen=True)
class FrozenEditorConfig:
    """The editors' own settings; target, data, backbone, W, gamma, rate and ProposalMix's
    eta / select / rule come from ``dedit`` (the pipeline that trains the frozen proposer)."""

    dedit: DEditConfig = field(default_factory=DEditConfig)
    proposer: str = "dflash"            # the ``dedit`` network that supplies P1, frozen
    variants: tuple[str, ...] = tuple(VARIANTS)
    steps: int | None = None            # None: ``dedit.steps`` (fewer fit the editors' cpu training budget)


def _check(config: FrozenEditorConfig) -> None:
    if not isinstance(config, FrozenEditorConfig):
        raise TypeError(f"config must be a FrozenEditorConfig, got {type(config).__name__}")
    if not isinstance(config.dedit, DEditConfig):
        raise TypeError(f"config.dedit must be a DEditConfig, got {type(config.dedit).__name__}")
    names = [n for n in network_names(config.dedit) if n == "dflash" or n.startswith("dflash_w")]
    if config.proposer not in names:
        raise ValueError(f"proposer must be a DFlash network of config.dedit, one of {names}, got {config.proposer!r}")
    width = dict((f"{n}_w{w}", w) for n, w in config.dedit.expansions).get(config.proposer, config.dedit.width)
    if width != config.dedit.width:                      # known before anything is trained
        raise ValueError(f"the proposer {config.proposer!r} drafts blocks of {width}, the editors are trained at "
                         f"W = {config.dedit.width}: choose a proposer trained at W = {config.dedit.width}")
    if not config.variants or any(v not in VARIANTS for v in config.variants):
        raise ValueError(f"variants must be a non-empty subset of {list(VARIANTS)}, got {list(config.variants)}")
    if config.steps is not None and (isinstance(config.steps, bool) or not isinstance(config.steps, int)
                                     or config.steps < 1):
        raise ValueError(f"steps must be None or an int >= 1, got {config.steps!r}")


def frozen_edit_loss(editor, proposer, embed, head, batch: block_edit.AnchorBatch, weights: torch.Tensor, *,
                     joint: bool = True, mix: bool = True, eta: float = 0.5, select: str = "high",
                     rule: str = "threshold") -> tuple[torch.Tensor, dict]:
    """L = L_unmask(editor) + L_edit (``joint``) or L_edit alone, the editing pass reading the
    frozen ``proposer``'s P1 through ProposalMix (``mix``) or as its argmax."""
    with torch.no_grad():
        p1 = block_edit.block_logits(proposer, embed, head, batch, batch.block)
    if mix:
        inputs, rates = block_edit.proposal_mix(p1, batch.labels, batch.block[..., 0], eta=eta, select=select,
                                                rule=rule)
    else:
        inputs = p1.argmax(-1)
        inputs[..., 0] = batch.block[..., 0]
        rates = {"gt_selection": 0.0, "overwrite": 0.0}
    p2 = block_edit.block_logits(editor, embed, head, batch, inputs)
    edit = block_edit.weighted_ce(p2, batch.labels, weights)
    parts = {"edit": float(edit.detach()), "p1_accuracy": block_edit._accuracy(p1, batch.labels),
             "p2_accuracy": block_edit._accuracy(p2, batch.labels), **rates}
    if not joint:
        return edit, parts
    unmask = block_edit.weighted_ce(block_edit.block_logits(editor, embed, head, batch, batch.block), batch.labels,
                                    weights)
    return unmask + edit, {**parts, "unmask": float(unmask.detach())}


def frozen_editor_key(config: FrozenEditorConfig) -> str:
    return cache_key(PIPELINE, config=asdict(config), proposer=dedit_cache_key(config.dedit))


def load_proposer(config: FrozenEditorConfig, progress: bool = True) -> FeatureBlockDrafter:
    """The frozen P1 network (trained by the DEdit pipeline on first use)."""
    path = save_block_drafters(config.dedit, progress) / config.proposer
    proposer = FeatureBlockDrafter.from_pretrained(path, local_files_only=True, dtype=torch.float32).eval()
    for p in proposer.parameters():
        p.requires_grad_(False)
    return proposer


def train_frozen_editors(config: FrozenEditorConfig, progress: bool = True, key: str = ""
                         ) -> tuple[dict, pd.DataFrame, dict]:
    """One editor per variant on the frozen proposer's P1, from DFlash's initial weights, with the
    same batches and steps; with the checkpoint ``key``, each editor resumes from its last save."""
    _check(config)
    d = config.dedit
    started = time.perf_counter()
    proposer = load_proposer(config, progress)
    s = setup(d, progress)
    for name in ("block_size", "mask_token_id", "target_layer_ids"):
        if getattr(proposer.config, name) != getattr(s.initial.config, name):
            raise RuntimeError(f"the proposer's {name} {getattr(proposer.config, name)} differs from the editors' "
                               f"{getattr(s.initial.config, name)}: the DEdit pipeline and drafter_setup disagree")
    weights = block_edit.position_weights(d.width, d.gamma)
    eval_gen = torch.Generator().manual_seed(d.seed + 1)
    eval_batches = [anchor_batch(d, s.hf_model, s.layer_ids, s.teacher["heldout_prompts"][i: i + d.batch_size],
                                 s.teacher["heldout_answers"][i: i + d.batch_size], s.mask_id, eval_gen)
                    for i in range(0, d.heldout_prompts, d.batch_size)]
    steps = config.steps or d.steps
    networks, history, restored = {}, [], 0.0
    for name in config.variants:
        gen = torch.Generator().manual_seed(d.seed)
        options = VARIANTS[name]

        def make_batch(step, gen=gen):
            pick = torch.randint(0, s.teacher["prompts"].shape[0], (d.batch_size,), generator=gen)
            return anchor_batch(d, s.hf_model, s.layer_ids, s.teacher["prompts"][pick], s.teacher["answers"][pick],
                                s.mask_id, gen)

        def loss_fn(model, batch, options=options):
            return frozen_edit_loss(model, proposer, s.embed, s.head, batch, weights, eta=d.eta,
                                    **{"select": d.select, "rule": d.rule, **options})

        editor = FeatureBlockDrafter(s.initial.config)
        editor.load_state_dict(s.initial.state_dict())
        torch.manual_seed(d.seed)
        resume = stage_resume("frozen_editors", key, name, [gen]) if key else None
        history.extend(fit(editor, make_batch, loss_fn, steps=steps, lr=d.lr, warmup=d.warmup,
                           eval_batches=eval_batches, eval_every=d.eval_every, label=name, progress=progress,
                           resume=resume))
        restored += resume.restored_seconds if resume else 0.0      # trained before this process
        networks[name] = editor.eval()
    record = {"train_seconds": time.perf_counter() - started + restored, "steps": steps, "layer_ids": s.layer_ids,
              "config": asdict(config), "proposer_key": dedit_cache_key(d), "checkpoint_key": frozen_editor_key(config)}
    return networks, pd.DataFrame(history).rename(columns={"stage": "model"}), record


def save_frozen_editors(config: FrozenEditorConfig, progress: bool = True):
    """Train ``config``'s editors unless cached; the checkpoint directory (written atomically)."""
    _check(config)
    return save_networks("frozen_editors", frozen_editor_key(config),
                         lambda key: train_frozen_editors(config, progress, key=key))
