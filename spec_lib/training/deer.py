"""Training DEER's drafters against a frozen AR target: the pipeline and its checkpoint cache.

Reference: seed 001, Sec. 3.4 "Stage I" / "Stage II" and their training configurations
(App. A: AdamW, Stage II at half Stage I's learning rate); the objectives are in
:mod:`spec_lib.training.d2a` and :mod:`spec_lib.training.next_token`.

:func:`train_deer` (one :class:`D2AConfig`) runs the stages in order:

1. :func:`teacher_data`: the AR target is the self-speculative model of
   :mod:`spec_lib.training.self_speculative` used in AR mode only, frozen (the best AR model
   this project trains; no second training run);
2. :func:`teacher_data` also draws corpus windows continued greedily by the target
   (:func:`spec_lib.training.teacher_sets.teacher_set`, cached and shared by presets of the same sizes);
3. :func:`train_diffusion_drafter`: a smaller Qwen3 run bidirectionally, pre-trained with
   the masked-diffusion objective on the corpus ("the pre-trained dLLM"), then Stage I on
   the teacher data, then Stage II once per ``alphas`` entry (the alpha sensitivity run);
4. :func:`train_ar_drafter` (the EAGLE-3 role): the same architecture run causally,
   pre-trained with next-token CE on the corpus, then distilled on the same answers.
   A config with ``shared_from`` (the ``-faithful`` presets) takes the pre-trained dLLM and the
   AR drafter of that preset instead: they do not depend on the Stage I / II objectives.

Checkpoints go to ``artifacts/drafters/<key>/<name>/`` (``save_pretrained``) with the loss
history; the key hashes the configuration, the target's checkpoint key and the source of
every module this pipeline imports.  :func:`spec_lib.training.deer_models.load_deer` wraps
them for decoding.  Training resumes from the last save: each stage saves its state under
``artifacts/drafters/<key>.partial/`` (:func:`spec_lib.training.cache.stage_resume`).
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import pandas as pd
import torch

from ..architectures import build_qwen3
from . import d2a, next_token
from .cache import cache_key, checkpoint_dir, checkpoint_writer, finish_partial, stage_resume
from .teacher_sets import corpus_streams, teacher_set
from .loop import fit
from .presets import PRESETS
from .self_speculative import checkpoint_key, load_or_train, windows

PIPELINE = "spec_lib.training.deer"


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
    max_suffix: int | None = 32        # Stage I suffix cap = the largest block size; None: the whole rest
    r_max: int = 32                    # Stage II R_max (the paper: 96 for longer answers)
    stage2_cut: str = "random"         # Stage II's R tokens end a randomly cut answer, or the answer ("answer_end")
    stage2_noise: bool = True          # Stage II also masks context tokens at context_noise * t
    alpha: float = 1.01                # Stage II weight base of the drafter used downstream
    alphas: tuple[float, ...] = (1.01, 1.02, 1.05)
    t_min: float = 0.1
    context_noise: float = 0.2         # kept tokens are masked with probability context_noise * t (1: at level t)
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
    shared_from: str | None = None     # a D2A preset whose pre-trained dLLM and AR drafter this one reuses


def _as_written(config: D2AConfig) -> D2AConfig:
    """``config`` with seed 001's objectives as written (:mod:`spec_lib.training.d2a`): the whole
    prefix as context, known tokens noised at level t and the whole rest of the answer masked
    in Stage I; the last R ~ U(1, 96) answer tokens, and nothing else, masked in Stage II.
    The teacher prompts are fixed-length corpus windows, so every Stage I context holds at
    least ``prompt_len + 1`` tokens (shorter evaluation prompts are outside that range)."""
    full = config.prompt_len + config.answer_len
    return replace(config, context=full, min_context=full, max_suffix=None, context_noise=1.0,
                   r_max=min(96, config.answer_len - 1), stage2_cut="answer_end", stage2_noise=False)


_SMOKE = D2AConfig(target_preset="smoke", hidden_size=32, num_layers=1, teacher_prompts=32, heldout_prompts=8,
                   prompt_len=32, answer_len=32, context=32, min_context=8, max_suffix=16, r_max=16,
                   batch_size=8, pretrain_len=48, pretrain_steps=6, stage1_steps=6, stage2_steps=4,
                   ar_pretrain_steps=6, ar_distill_steps=4, eval_every=3, max_files=20)

#: DEER's drafters per profile: ``<profile>`` with this project's cpu-scale objectives, and
#: ``<profile>-faithful`` with the objectives as written (the same teacher data, sizes and steps).
#: The faithful variant reuses ``<profile>``'s pre-trained dLLM and AR drafter: neither depends
#: on the Stage I / II objectives (:data:`SHARED_FIELDS`), so training them twice gave nothing.
D2A_PRESETS: dict[str, D2AConfig] = {
    "smoke": _SMOKE,
    "smoke-faithful": replace(_as_written(_SMOKE), shared_from="smoke"),
    "cpu": D2AConfig(),
    "cpu-faithful": replace(_as_written(D2AConfig()), shared_from="cpu"),
}

#: What the pre-trained dLLM and the AR drafter depend on: a config may reuse another's
#: (``shared_from``) only when these are equal.
SHARED_FIELDS = ("target_preset", "hidden_size", "num_layers", "num_heads", "teacher_prompts", "heldout_prompts",
                 "prompt_len", "answer_len", "batch_size", "pretrain_len", "pretrain_steps", "ar_pretrain_steps",
                 "ar_distill_steps", "lr", "stage1_lr", "warmup", "eval_every", "seed", "max_files", "t_min")
#: The drafters a config with ``shared_from`` takes from that preset instead of training them.
SHARED_DRAFTERS = ("pretrained", "ar_distilled")


def shared_base(config: D2AConfig) -> D2AConfig | None:
    """The preset config whose pre-trained dLLM and AR drafter ``config`` reuses, or None.

    Raises:
        ValueError: ``shared_from`` names no preset, or one that differs in :data:`SHARED_FIELDS`.
    """
    if config.shared_from is None:
        return None
    if config.shared_from not in D2A_PRESETS:
        raise ValueError(f"shared_from must be one of {list(D2A_PRESETS)} or None, got {config.shared_from!r}")
    base = D2A_PRESETS[config.shared_from]
    differ = [name for name in SHARED_FIELDS if getattr(base, name) != getattr(config, name)]
    if differ or base.shared_from is not None:
        raise ValueError(f"shared_from={config.shared_from!r}: that preset trains its shared drafters with other "
                         f"settings ({differ or 'it shares in turn'}), so they cannot be reused")
    return base


def objectives(config: D2AConfig) -> str:
    """``"faithful"`` when ``config`` trains seed 001's objectives as written, else ``"cpu-scale"``."""
    return "faithful" if config == _as_written(config) else "cpu-scale"


@dataclass
class DeerTraining:
    """What :func:`train_deer` produces: the drafters (``hf_models[name]``), history, record."""

    hf_models: dict
    history: pd.DataFrame
    record: dict = field(default_factory=dict)


def stage2_name(alpha: float) -> str:
    return f"stage2_alpha{alpha:g}"


def drafter_names(config: D2AConfig) -> list[str]:
    """Every checkpoint the pipeline saves."""
    return ["pretrained", "stage1", *map(stage2_name, config.alphas), "ar_distilled"]


def deer_cache_key(config: D2AConfig) -> str:
    """Cache key: config, the target's checkpoint key (and that of a ``shared_from`` preset),
    this pipeline's code."""
    base = shared_base(config)
    return cache_key(PIPELINE, config=asdict(config), target=checkpoint_key(*PRESETS[config.target_preset]),
                     shared=None if base is None else deer_cache_key(base))


def _build(config: D2AConfig, vocab_size: int, tokenizer, seed: int):
    model = build_qwen3(vocab_size, hidden_size=config.hidden_size, num_layers=config.num_layers,
                        num_heads=config.num_heads, max_positions=2048,        # RoPE: positions of the target
                        seed=seed)
    for name in ("mask", "sep", "pad", "eos"):
        setattr(model.config, f"{name}_token_id", getattr(tokenizer, f"{name}_token_id"))
    return model


@dataclass
class Teacher:
    """The frozen target, its tokenizer, corpus streams and the teacher answers."""

    target: object
    tokenizer: object
    stream: object
    heldout: object
    prompts: torch.Tensor
    answers: torch.Tensor
    heldout_prompts: torch.Tensor
    heldout_answers: torch.Tensor
    seconds: float


def _resume(key: str, label: str, generators, resumes: list | None):
    """Stage ``label``'s :class:`~spec_lib.training.loop.Resume` under ``drafters/<key>``, added to
    ``resumes`` (None without a key: no resume)."""
    if not key:
        return None
    resume = stage_resume("drafters", key, label, generators)
    if resumes is not None:
        resumes.append(resume)
    return resume


def teacher_data(config: D2AConfig, progress: bool) -> Teacher:
    """The frozen target (trained on first use), the corpus streams and the teacher set."""
    if config.target_preset not in PRESETS:
        raise ValueError(f"target_preset must be one of {list(PRESETS)}, got {config.target_preset!r}")
    target = load_or_train(*PRESETS[config.target_preset], progress=progress)
    target_hf, tokenizer = target.hf_model.eval(), target.tokenizer
    for p in target_hf.parameters():
        p.requires_grad_(False)
    stream, heldout = corpus_streams(config.target_preset, tokenizer, config.max_files)
    out = teacher_set(config, target_hf, tokenizer, stream, heldout, progress)
    return Teacher(target_hf, tokenizer, stream, heldout, out["prompts"], out["answers"], out["heldout_prompts"],
                   out["heldout_answers"], float(out["seconds"]))


def train_diffusion_drafter(config: D2AConfig, teacher: Teacher, gen: torch.Generator, eval_gen: torch.Generator,
                            progress: bool, key: str = "", resumes: list | None = None,
                            pretrained=None) -> tuple[dict, list[dict]]:
    """Masked-diffusion pre-training (skipped when ``pretrained`` is given: a shared pre-trained
    dLLM), Stage I (Eq. 1-2), Stage II per alpha (Eq. 3-4); with a checkpoint ``key``, each
    stage resumes from its last save (its Resume added to ``resumes``)."""
    tokenizer = teacher.tokenizer
    ids = dict(mask_token_id=tokenizer.mask_token_id)
    cont = dict(**ids, sep_token_id=tokenizer.sep_token_id, pad_token_id=tokenizer.pad_token_id,
                context=config.context, min_context=config.min_context, max_suffix=config.max_suffix,
                r_max=config.r_max, t_min=config.t_min, context_noise=config.context_noise,
                stage2_cut=config.stage2_cut, stage2_noise=config.stage2_noise)
    n_eval = min(config.heldout_prompts, config.batch_size)
    common = dict(warmup=config.warmup, eval_every=config.eval_every, progress=progress)

    def held_out_batches(stage, alpha=1.0):
        return [d2a.continuation_batch(teacher.heldout_prompts[i: i + n_eval], teacher.heldout_answers[i: i + n_eval],
                                       stage=stage, alpha=alpha, generator=eval_gen, **cont)
                for i in range(0, config.heldout_prompts, n_eval)]

    def stage_batches(stage, alpha=1.0):
        def make(step):
            pick = torch.randint(0, teacher.prompts.shape[0], (config.batch_size,), generator=gen)
            return d2a.continuation_batch(teacher.prompts[pick], teacher.answers[pick], stage=stage, alpha=alpha,
                                          generator=gen, **cont)
        return make

    def corpus_batch(step):
        rows = windows(teacher.stream, config.pretrain_len, config.batch_size, gen)
        return d2a.masked_diffusion_batch(rows, generator=gen, t_min=config.t_min, **ids)

    models, history = {}, []
    if pretrained is None:
        dllm = _build(config, int(teacher.target.config.vocab_size), tokenizer, config.seed)
        corpus_eval = [d2a.masked_diffusion_batch(windows(teacher.heldout, config.pretrain_len, n_eval, eval_gen),
                                                  generator=eval_gen, t_min=config.t_min, **ids)]
        history += fit(dllm, corpus_batch, d2a.diffusion_loss, steps=config.pretrain_steps, lr=config.lr,
                       eval_batches=corpus_eval, label="pretrained", resume=_resume(key, "pretrained", [gen], resumes),
                       **common)
    else:
        dllm = copy.deepcopy(pretrained).float()
    models["pretrained"] = copy.deepcopy(dllm)
    history += fit(dllm, stage_batches(1), d2a.diffusion_loss, steps=config.stage1_steps, lr=config.stage1_lr,
                   eval_batches=held_out_batches(1), label="stage1", resume=_resume(key, "stage1", [gen], resumes),
                   **common)
    models["stage1"] = copy.deepcopy(dllm)
    for alpha in config.alphas:
        refined = copy.deepcopy(models["stage1"])
        history += fit(refined, stage_batches(2, alpha), d2a.diffusion_loss, steps=config.stage2_steps,
                       lr=config.stage2_lr, eval_batches=held_out_batches(2, alpha), label=stage2_name(alpha),
                       resume=_resume(key, stage2_name(alpha), [gen], resumes), **common)
        models[stage2_name(alpha)] = refined
    return models, history


def train_ar_drafter(config: D2AConfig, teacher: Teacher, gen: torch.Generator, eval_gen: torch.Generator,
                     progress: bool, key: str = "", resumes: list | None = None) -> tuple[object, list[dict]]:
    """Next-token pre-training on the corpus, then distillation on the teacher answers (resumable
    with a checkpoint ``key``, as :func:`train_diffusion_drafter`)."""
    n_eval = min(config.heldout_prompts, config.batch_size)
    common = dict(warmup=config.warmup, eval_every=config.eval_every, progress=progress)

    def loss_fn(model, batch):
        return next_token.ar_loss(model, *batch)

    def corpus_batch(step):
        return next_token.ar_batch(windows(teacher.stream, config.pretrain_len, config.batch_size, gen))

    def distill_batch(step):
        pick = torch.randint(0, teacher.prompts.shape[0], (config.batch_size,), generator=gen)
        return next_token.ar_batch(teacher.prompts[pick], teacher.answers[pick])

    ar = _build(config, int(teacher.target.config.vocab_size), teacher.tokenizer, config.seed + 7)
    history = fit(ar, corpus_batch, loss_fn, steps=config.ar_pretrain_steps, lr=config.lr, label="ar_pretrained",
                  eval_batches=[next_token.ar_batch(windows(teacher.heldout, config.pretrain_len, n_eval, eval_gen))],
                  resume=_resume(key, "ar_pretrained", [gen], resumes), **common)
    history += fit(ar, distill_batch, loss_fn, steps=config.ar_distill_steps, lr=config.stage1_lr, label="ar_distilled",
                   eval_batches=[next_token.ar_batch(teacher.heldout_prompts[:n_eval], teacher.heldout_answers[:n_eval])],
                   resume=_resume(key, "ar_distilled", [gen], resumes), **common)
    return ar, history


def train_deer(config: D2AConfig, progress: bool = True, key: str = "") -> DeerTraining:
    """Run the whole pipeline (see the module docstring); deterministic given ``config.seed``.
    With the checkpoint ``key``, every stage resumes from its last save (same weights)."""
    started = time.perf_counter()
    torch.manual_seed(config.seed)
    gen = torch.Generator().manual_seed(config.seed)
    eval_gen = torch.Generator().manual_seed(config.seed + 1)
    base = shared_base(config)
    shared, shared_history = {}, []
    if base is not None:                       # before the clock: its training time is its own record's
        trained_base, _ = load_or_train_deer(base, progress=progress)
        shared = {name: trained_base.hf_models[name] for name in SHARED_DRAFTERS}
        shared_history = trained_base.history[trained_base.history["model"].isin(
            ["pretrained", "ar_pretrained", "ar_distilled"])].rename(columns={"model": "stage"}).to_dict("records")
        started = time.perf_counter()
    teacher = teacher_data(config, progress)
    resumes: list = []
    models, history = train_diffusion_drafter(config, teacher, gen, eval_gen, progress, key, resumes,
                                              pretrained=shared.get("pretrained"))
    if base is None:
        models["ar_distilled"], ar_history = train_ar_drafter(config, teacher, gen, eval_gen, progress, key, resumes)
    else:
        models["ar_distilled"], ar_history = copy.deepcopy(shared["ar_distilled"]).float(), []
        history = shared_history + history
    restored = sum(r.restored_seconds for r in resumes)        # trained before this process
    record = {"train_seconds": time.perf_counter() - started + restored, "teacher_seconds": teacher.seconds,
              "objectives": objectives(config),
              "corpus_tokens": int(len(teacher.stream)), "heldout_tokens": int(len(teacher.heldout)),
              "teacher_rows": int(teacher.prompts.shape[0]), "teacher_tokens": int(teacher.answers.numel()),
              "drafter_parameters": int(sum(p.numel() for p in models["stage1"].parameters())),
              "target_parameters": int(sum(p.numel() for p in teacher.target.parameters())),
              "config": asdict(config), "target_checkpoint_key": checkpoint_key(*PRESETS[config.target_preset]),
              "checkpoint_key": deer_cache_key(config),
              "shared_from": None if base is None else {"preset": config.shared_from, "key": deer_cache_key(base),
                                                         "drafters": list(SHARED_DRAFTERS)}}
    frame = pd.DataFrame(history + ar_history).rename(columns={"stage": "model"})
    return DeerTraining(models, frame, record)


def save_deer(trained: DeerTraining, path: Path) -> Path:
    """Every drafter with ``save_pretrained``, plus history and record, written atomically."""
    with checkpoint_writer(path) as tmp:
        for name, hf_model in trained.hf_models.items():
            hf_model.save_pretrained(tmp / name)
        trained.history.to_csv(tmp / "history.csv", index=False)
        (tmp / "record.json").write_text(json.dumps(trained.record, indent=2))
    return Path(path)


def load_or_train_deer(config: D2AConfig, progress: bool = True, dtype: torch.dtype = torch.float32,
                       device: str = "cpu") -> tuple[DeerTraining, Path]:
    """The drafters of ``config``: cached, or trained now and cached."""
    from transformers import AutoModelForCausalLM

    path = checkpoint_dir("drafters", deer_cache_key(config))
    if not (path / "record.json").exists():
        save_deer(train_deer(config, progress=progress, key=path.name), path)
        finish_partial("drafters", path.name)
    hf_models = {n: AutoModelForCausalLM.from_pretrained(path / n, local_files_only=True, dtype=dtype).to(device).eval()
                 for n in drafter_names(config)}
    return DeerTraining(hf_models, pd.read_csv(path / "history.csv"),
                        json.loads((path / "record.json").read_text())), path
