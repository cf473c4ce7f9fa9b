"""Teacher sets of the separate drafters (DEER, seed 001; DFlash / DEdit, seed 002): corpus
windows and the frozen target's greedy continuations of them, cached under
``artifacts/teacher/`` by the target's checkpoint key, the sizes, the seed and this module's
source, so pipelines and presets that ask for the same sizes share one set.
"""

from __future__ import annotations

import time

import torch

from ..io import atomic_directory
from . import data
from .cache import artifacts_dir, cache_key
from .presets import PRESETS
from .self_speculative import checkpoint_key, windows
from .teacher import greedy_continuations

#: The fields of a pipeline config that decide its teacher set.
TEACHER_FIELDS = ("target_preset", "teacher_prompts", "heldout_prompts", "prompt_len", "answer_len", "seed",
                  "max_files")


def corpus_streams(target_preset: str, tokenizer, max_files: int | None) -> tuple:
    """The target's training corpus and the held-out stdlib files as token streams."""
    target_config = PRESETS[target_preset][1]
    docs = data.training_documents(target_config.math_share, target_config.copy_share, target_config.seed,
                                   max_files=max_files or target_config.max_files)
    heldout_docs = [data.read_source(p) for p in data.stdlib_files("heldout")[:max_files]]
    return data.token_stream(docs, tokenizer), data.token_stream(heldout_docs, tokenizer)


def teacher_set(config, target_hf, tokenizer, stream, heldout, progress: bool = True) -> dict[str, torch.Tensor]:
    """``prompts``, ``answers``, ``heldout_prompts``, ``heldout_answers`` (token ids) and the
    generation ``seconds`` for ``config``'s :data:`TEACHER_FIELDS`: windows of ``stream`` and
    ``heldout`` drawn with a generator of their own (seeded ``config.seed``), continued greedily
    by ``target_hf``; cached."""
    parts = {k: getattr(config, k) for k in TEACHER_FIELDS}
    path = artifacts_dir() / "teacher" / cache_key(__name__, **parts,
                                                   target=checkpoint_key(*PRESETS[config.target_preset]))
    if not (path / "teacher.pt").exists():
        gen = torch.Generator().manual_seed(config.seed)
        started = time.perf_counter()
        out = {"prompts": windows(stream, config.prompt_len, config.teacher_prompts, gen),
               "heldout_prompts": windows(heldout, config.prompt_len, config.heldout_prompts, gen)}
        out["answers"] = greedy_continuations(target_hf, out["prompts"], config.answer_len, batch=64,
                                              progress=progress)
        out["heldout_answers"] = greedy_continuations(target_hf, out["heldout_prompts"], config.answer_len,
                                                      batch=64, progress=progress)
        out["seconds"] = torch.tensor(time.perf_counter() - started)
        with atomic_directory(path) as tmp:
            torch.save(out, tmp / "teacher.pt")
    return torch.load(path / "teacher.pt")
