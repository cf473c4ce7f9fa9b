"""Seed 000's per-call cost, tau + delta n (Sec. 1), on the compiled static-cache path: notebook
01's ``compiled`` parameter.

:func:`time_forward_rows` times the calls :func:`spec_lib.studies.costmodel.time_forward_rows`
times on the eager path (n new rows over a cached prefix of ``cache_len``, causal among
themselves, every row's logits) with :mod:`spec_lib.compiled`'s pieces: a transformers
``StaticCache`` rewound by its length pointer after each call, an additive mask of the cache's
fixed width, and one compiled region per row count (:class:`~spec_lib.compiled.CompiledRegions`:
guards skipped after the first call, inductor's C++ wrapper on a CPU), every region compiled
before the timing starts.  :func:`~spec_lib.studies.costmodel.fit_cost` fits either table.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from .. import masks
from ..architectures import attention_window
from ..compiled import CompiledRegions, MaskStrips, static_mask

__all__ = ["time_forward_rows", "timings_by_path"]


def _check_sizes(row_counts, cache_len: int, repeats: int) -> list[int]:
    counts = list(row_counts) if isinstance(row_counts, (list, tuple)) else None
    if not counts or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in counts):
        raise ValueError(f"row_counts must be a non-empty list of ints >= 1, got {row_counts!r}")
    for name, value in (("cache_len", cache_len), ("repeats", repeats)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return counts


def time_forward_rows(hf_model, row_counts, *, cache_len: int = 256, repeats: int = 15, seed: int = 0,
                      progress: bool = True) -> pd.DataFrame:
    """Seconds of one compiled forward call with n new rows over ``cache_len`` cached tokens.

    Rows as :func:`spec_lib.studies.costmodel.time_forward_rows`' (``repeat``, ``rows``,
    ``seconds``) plus ``compile_seconds`` per row count (the compiling call, not timed); row
    counts in a new random order in every repeat.  Full-attention models only (the static
    cache's pointer cannot rewind a sliding window's ring buffer).
    """
    from transformers import StaticCache

    counts = _check_sizes(row_counts, cache_len, repeats)
    config = hf_model.config
    text = config.get_text_config(decoder=True)
    window = attention_window(config)
    if window is not None:
        raise ValueError(f"the compiled path needs a full-attention model; this {config.model_type} model has a "
                         f"sliding window of {window}")
    max_positions = getattr(text, "max_position_embeddings", None)
    slots = cache_len + max(counts)
    if max_positions is not None and slots > max_positions:
        raise ValueError(f"cache_len + max(row_counts) = {slots} exceeds the model's max_position_embeddings "
                         f"({max_positions})")
    if hf_model.training:
        hf_model.eval()
    parameter = next(hf_model.parameters())
    device, dtype = parameter.device, parameter.dtype
    vocab = text.vocab_size
    gen = torch.Generator().manual_seed(seed)
    cache = StaticCache(config=config, max_cache_len=slots)

    def forward(input_ids, position_ids, attention_mask):
        return hf_model(input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask,
                        cache=cache, use_cache=True, logits_to_keep=0).logits

    def causal(n: int) -> torch.Tensor:
        return masks.to_additive(torch.ones(n, n, dtype=torch.bool, device=device).tril(), dtype)

    prefix = torch.randint(0, vocab, (1, cache_len), generator=gen).to(device)
    with torch.inference_mode():                        # the cached prefix, eagerly
        forward(prefix, torch.arange(cache_len, device=device)[None], static_mask(causal(cache_len), 0, slots))
    regions, strips = CompiledRegions(forward), MaskStrips(slots)
    blocks = {n: causal(n) for n in counts}
    positions = {n: torch.arange(cache_len, cache_len + n, device=device)[None] for n in counts}

    def call(n: int) -> float:
        ids = torch.randint(0, vocab, (1, n), generator=gen).to(device)
        mask = strips.mask(blocks[n], cache_len)
        with torch.inference_mode():
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
            regions(("rows", n), (dtype, device), device, ids, positions[n], mask)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            seconds = time.perf_counter() - start
        cache.crop(-n)                                   # back to the prefix: the pointer moves
        return seconds

    for n in tqdm(counts, desc="compiling row counts", disable=not progress):
        call(n)
    rng = np.random.default_rng(seed)
    records = []
    for repeat in tqdm(range(repeats), desc="timing compiled forward calls", disable=not progress):
        for n in rng.permutation(np.asarray(counts)):
            records.append({"repeat": repeat, "rows": int(n), "seconds": call(int(n))})
    compiled = {shape[1]: s for shape, s in regions.compile_seconds.items()}
    return pd.DataFrame(records).assign(compile_seconds=lambda t: t["rows"].map(compiled))


def timings_by_path(hf_model, eager: pd.DataFrame, compiled: bool, *, row_counts, cache_len: int = 256,
                    repeats: int = 15, seed: int = 0, progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """``(timings, fits_table, fits)``: the eager path's forward timings ``eager`` (from
    :func:`spec_lib.studies.costmodel.time_forward_rows`) and, when ``compiled``, the compiled
    path's (:func:`time_forward_rows`, the same row counts), in one table with a ``path``
    column; each path's :func:`~spec_lib.studies.costmodel.fit_cost` as a dict and as a table
    (tau, delta with their intervals, tau/delta, R^2)."""
    from .costmodel import fit_cost

    if not isinstance(compiled, bool):
        raise TypeError(f"compiled must be a bool, got {compiled!r}")
    parts = [eager.assign(path="eager")]
    if compiled:
        parts.append(time_forward_rows(hf_model, row_counts, cache_len=cache_len, repeats=repeats, seed=seed,
                                       progress=progress).assign(path="compiled"))
    timings = pd.concat(parts, ignore_index=True)
    fits = {path: fit_cost(part) for path, part in timings.groupby("path", sort=False)}
    table = pd.DataFrame([{"path": path, "tau_ms": 1e3 * f["tau"], "tau_ci_ms": tuple(1e3 * np.asarray(f["tau_ci"])),
                           "delta_ms": 1e3 * f["delta"], "delta_ci_ms": tuple(1e3 * np.asarray(f["delta_ci"])),
                           "tau_over_delta": f["tau"] / f["delta"], "r2": f["r2"]} for path, f in fits.items()])
    return timings, table, fits
