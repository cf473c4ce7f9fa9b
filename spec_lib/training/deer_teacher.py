"""DEER's teacher data: corpus windows continued greedily by the frozen target (seed 001,
Sec. 3.4, Stage I's "teacher answers"), cached under ``artifacts/teacher/`` by the target's
checkpoint key, the sizes in :data:`TEACHER_FIELDS` and this module's source, so DEER presets
that differ only in their objectives share them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from ..io import atomic_directory
from . import data
from .cache import artifacts_dir, cache_key
from .presets import PRESETS
from .self_speculative import checkpoint_key, load_or_train, windows
from .teacher import greedy_continuations

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


def target_and_corpus(config, progress: bool):
    """The frozen target (trained on first use), its tokenizer, and train / held-out streams."""
    if config.target_preset not in PRESETS:
        raise ValueError(f"target_preset must be one of {list(PRESETS)}, got {config.target_preset!r}")
    model_config, target_config = PRESETS[config.target_preset]
    target = load_or_train(model_config, target_config, progress=progress)
    target_hf, tokenizer = target.hf_model.eval(), target.tokenizer
    for p in target_hf.parameters():
        p.requires_grad_(False)
    docs = data.training_documents(target_config.math_share, target_config.copy_share, target_config.seed,
                                   max_files=config.max_files or target_config.max_files)
    heldout_docs = [data.read_source(p) for p in data.stdlib_files("heldout")[: config.max_files]]
    return target_hf, tokenizer, data.token_stream(docs, tokenizer), data.token_stream(heldout_docs, tokenizer)


TEACHER_FIELDS = ("target_preset", "teacher_prompts", "heldout_prompts", "prompt_len", "answer_len", "seed",
                  "max_files")


def teacher_data(config, progress: bool) -> Teacher:
    """Corpus windows and held-out windows, continued greedily by the frozen target; cached
    under ``artifacts/teacher/`` by the target's key and :data:`TEACHER_FIELDS`, so presets that
    differ only in their objectives share them (drawn with their own generator, so a cached
    and a fresh run train on the same batches)."""
    target_hf, tokenizer, stream, heldout = target_and_corpus(config, progress)
    parts = {k: getattr(config, k) for k in TEACHER_FIELDS}
    path = artifacts_dir() / "teacher" / ("deer-" + cache_key(__name__, **parts,
                                                              target=checkpoint_key(*PRESETS[config.target_preset])))
    if not (path / "teacher.pt").exists():
        gen = torch.Generator().manual_seed(config.seed + 2)
        started = time.perf_counter()
        out = {"prompts": windows(stream, config.prompt_len, config.teacher_prompts, gen)}
        out["answers"] = greedy_continuations(target_hf, out["prompts"], config.answer_len, batch=64, progress=progress)
        out["heldout_prompts"] = windows(heldout, config.prompt_len, config.heldout_prompts, gen)
        out["heldout_answers"] = greedy_continuations(target_hf, out["heldout_prompts"], config.answer_len, batch=64,
                                                      progress=progress)
        out["seconds"] = torch.tensor(time.perf_counter() - started)
        with atomic_directory(path) as tmp:
            torch.save(out, tmp / "teacher.pt")
    out = torch.load(path / "teacher.pt")
    return Teacher(target_hf, tokenizer, stream, heldout, out["prompts"], out["answers"], out["heldout_prompts"],
                    out["heldout_answers"], float(out["seconds"]))
