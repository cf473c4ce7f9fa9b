"""Peer implementations run on the same models and prompts as the project's schedules.

* transformers assisted generation (``generate(assistant_model=...)``): the peer of the
  ``ar_draft`` schedule (an AR drafter proposing k tokens, the target verifying them).
  The assistant's ``num_assistant_tokens`` is fixed to k with the "constant" schedule and
  ``assistant_confidence_threshold = 0`` so that every cycle drafts k tokens, as
  ``ar_draft`` does.  transformers runs it at batch size 1 only (docs/architecture.md, "Facts").
"""

from __future__ import annotations

import copy
import time

import pandas as pd
import torch
from tqdm.auto import tqdm

from ..decoding import decode


def assisted_generate(target_hf, assistant_hf, prompt: list[int], *, k: int, max_new_tokens: int,
                      eos_token_id: int | None, pad_token_id: int) -> tuple[list[int], float]:
    """Greedy assisted generation of one prompt: ``(tokens, wall seconds)``."""
    from transformers.utils import logging as hf_logging

    ids = torch.tensor([prompt], device=target_hf.device)
    verbosity = hf_logging.get_verbosity()
    # transformers' own assistant loop passes a generation_config together with keyword
    # arguments and warns about it (a deprecation inside the library, not in this call).
    hf_logging.set_verbosity_error()
    start = time.perf_counter()
    try:
        with torch.inference_mode():
            out = target_hf.generate(ids, attention_mask=torch.ones_like(ids), assistant_model=assistant_hf,
                                     do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id,
                                     pad_token_id=pad_token_id)
    finally:
        hf_logging.set_verbosity(verbosity)
    return out[0, ids.shape[1]:].tolist(), time.perf_counter() - start


def configured_assistant(assistant_hf, k: int):
    """A copy of the assistant model whose generation config drafts exactly k tokens."""
    assistant = copy.deepcopy(assistant_hf)
    config = assistant.generation_config
    config.num_assistant_tokens = k
    config.num_assistant_tokens_schedule = "constant"
    config.assistant_confidence_threshold = 0.0
    return assistant


def compare_assisted(target, drafter, prompts: list[list[int]], *, k: int, max_new_tokens: int,
                     eos_token_id: int | None, pad_token_id: int, repeats: int = 1,
                     progress: bool = True) -> pd.DataFrame:
    """``ar_draft`` (this project) vs transformers assisted generation, interleaved prompt by
    prompt (the order alternates): one row per (repeat, prompt, implementation) with tokens,
    wall seconds and the output."""
    assistant = configured_assistant(drafter.hf_model, k)
    target_hf = target.hf_model
    rows = []
    jobs = [(r, i) for r in range(repeats) for i in range(len(prompts))]
    for n, (r, i) in enumerate(tqdm(jobs, desc="ar_draft vs assisted generation", disable=not progress)):
        order = ("ar_draft", "assisted") if n % 2 == 0 else ("assisted", "ar_draft")
        for impl in order:
            if impl == "ar_draft":
                res = decode(target, prompts[i], schedule="ar_draft", width=k, max_new_tokens=max_new_tokens,
                             eos_token_id=eos_token_id, drafter=drafter)
                tokens, wall = res.tokens, res.wall_seconds
            else:
                tokens, wall = assisted_generate(target_hf, assistant, prompts[i], k=k, max_new_tokens=max_new_tokens,
                                                 eos_token_id=eos_token_id, pad_token_id=pad_token_id)
            rows.append({"repeat": r, "prompt": i, "implementation": impl, "tokens": len(tokens), "wall": wall,
                         "output": tuple(tokens)})
    return pd.DataFrame(rows)


def summary(peer: pd.DataFrame, n_resamples: int, seed: int) -> dict:
    """Identical outputs and ``ar_draft``'s throughput over assisted generation, with a paired
    bootstrap interval over prompts (:func:`spec_lib.studies.bench.paired_bootstrap`)."""
    from .bench import paired_bootstrap

    outputs = peer.pivot_table(index=["repeat", "prompt"], columns="implementation", values="output", aggfunc="first")
    ratio = paired_bootstrap(peer.assign(slice="code", method=peer["implementation"]), "assisted",
                             n_resamples=n_resamples, seed=seed).iloc[0]
    return {"prompts": int(peer["prompt"].nunique()), "repeats": int(peer["repeat"].nunique()),
            "identical_outputs": int((outputs["ar_draft"] == outputs["assisted"]).sum()),
            "responses": int(len(outputs)), "ar_draft_over_assisted": float(ratio["throughput_ratio"]),
            "ci": [float(ratio["throughput_ratio_low"]), float(ratio["throughput_ratio_high"])]}
