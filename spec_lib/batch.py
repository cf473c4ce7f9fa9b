"""Batched greedy decoding with per-sequence acceptance: AR and DEER (seed 001, RQ3, Table 5).

Reference: seed 001, Sec. 4.4 "Batch inference": several sequences decode together, each
accepting its own number of draft tokens per cycle.  The paper ran both methods without a
KV cache; here the target keeps one (transformers' assisted generation does not batch).

Ragged lengths are handled with **slots**: the target's cache has one column per slot,
shared by all sequences, and a boolean ``valid`` matrix says which slots of each sequence
hold verified tokens.  Every cycle appends k + 1 slots for every live sequence ([last,
d^(1..k)], each at its own position ids) and marks the first a_b of them valid: the same
"keep the verified prefix except its last token" rule as :class:`spec_lib.models.VerifiedCache`.
Invalid slots are masked out (additive mask per sequence) and squeezed out when they make
up half the cache; finished sequences leave the batch.  One host sync per cycle.
"""

from __future__ import annotations

import time

import torch

from .schedules.common import DecodeResult, as_prompt_tensor

BATCH_SCHEDULES = ("ar", "deer")


class _SlotCache:
    """A transformers ``DynamicCache`` plus per-sequence slot validity."""

    def __init__(self, config, batch: int, device: torch.device) -> None:
        from transformers import DynamicCache

        self.cache = DynamicCache(config=config)
        self.valid = torch.zeros(batch, 0, dtype=torch.bool, device=device)

    def mask(self, new_visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """``(N, 1, n, slots + n)`` additive mask: valid slots of the own sequence, then the
        ``(N, n, n)`` visibility among the new rows."""
        n = new_visible.shape[-1]
        visible = torch.cat([self.valid[:, None, :].expand(-1, n, -1), new_visible], dim=2)
        mask = torch.zeros(visible.shape, dtype=dtype, device=visible.device)
        return mask.masked_fill_(~visible, torch.finfo(dtype).min)[:, None]

    def append(self, keep: torch.Tensor) -> None:
        """The slots of the last call: ``keep (N, n)`` says which hold verified tokens."""
        self.valid = torch.cat([self.valid, keep], dim=1)

    def select(self, rows: torch.Tensor) -> None:
        """Keep only sequences ``rows`` (finished ones leave the batch)."""
        self.cache.batch_select_indices(rows)
        self.valid = self.valid[rows]

    def squeeze(self) -> None:
        """Move each sequence's valid slots to the front and drop columns nobody uses."""
        counts = self.valid.sum(1)
        width = int(counts.max())
        order = torch.sort((~self.valid).to(torch.int8), dim=1, stable=True).indices[:, :width]   # valid first
        for layer in self.cache.layers:
            index = order[:, None, :, None].expand(-1, layer.keys.shape[1], -1, layer.keys.shape[3])
            layer.keys = layer.keys.gather(2, index)
            layer.values = layer.values.gather(2, index)
        self.valid = torch.arange(width, device=counts.device)[None, :] < counts[:, None]


def decode_batch(target, prompts: list, *, schedule: str, width: int, max_new_tokens: int, drafter=None,
                 eos_token_id: int | None = None) -> tuple[list[DecodeResult], dict]:
    """Greedy decoding of several prompts together.

    Args:
        target: a :class:`spec_lib.models.DualModeLM` (its ``hf_model`` is used causally).
        prompts: list of non-empty token-id sequences (ragged).
        schedule: ``"ar"`` or ``"deer"`` (needs ``drafter``, a
            :class:`spec_lib.drafters.DiffusionDrafter`).
        width: block size k of the drafter (ignored by ``ar``).
        max_new_tokens: output limit per sequence.
        eos_token_id: a sequence stops at its first accepted EOS.

    Returns:
        ``(results, totals)``: one :class:`DecodeResult` per prompt (``nfe``, ``accepted``
        per sequence; the prompt is processed in a call of its own, so ``nfe`` is one more
        than :func:`spec_lib.decode` counts for the same output; ``wall_seconds`` and
        ``model_seconds`` are the whole batch's) and
        ``{"wall_seconds", "model_seconds", "tokens", "cycles"}`` of the batch.
    """
    if schedule not in BATCH_SCHEDULES:
        raise ValueError(f"schedule must be one of {list(BATCH_SCHEDULES)}, got {schedule!r}")
    if schedule == "deer" and getattr(drafter, "kind", None) != "diffusion":
        raise ValueError("schedule 'deer' needs drafter= a spec_lib.drafters.DiffusionDrafter")
    if schedule == "ar" and drafter is not None:
        raise ValueError("schedule 'ar' takes no drafter")
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ValueError(f"width must be an int >= 1, got {width!r}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
    if not prompts:
        raise ValueError("prompts must be a non-empty list of token-id sequences")
    if not hasattr(target, "hf_model"):
        raise TypeError(f"target must be a spec_lib.models.DualModeLM, got {type(target).__name__}")
    started = time.perf_counter()
    hf = target.hf_model
    device, dtype = target.device, target.dtype
    items = [as_prompt_tensor(p, target.vocab_size, device) for p in prompts]
    k = width if schedule == "deer" else 0
    n_seq = len(items)
    lengths = torch.tensor([p.numel() for p in items], device=device)
    buffer = torch.zeros(n_seq, int(lengths.max()) + max_new_tokens + k + 2, dtype=torch.long, device=device)
    for b, p in enumerate(items):
        buffer[b, : p.numel()] = p
    prompt_lengths = lengths.clone()
    live = torch.arange(n_seq, device=device)                   # sequences still in the batch
    live_host = list(range(n_seq))                              # the same, on the host
    length_host = [p.numel() for p in items]                    # verified lengths, on the host
    per_cycle: list[tuple[list[int], list[int]]] = []           # (live sequences, tokens appended)
    model_seconds = drafter_seconds = 0.0
    slots = _SlotCache(hf.config, n_seq, device)

    def forward(ids, positions, new_visible):
        nonlocal model_seconds
        mask = slots.mask(new_visible, dtype)
        start = time.perf_counter()
        with torch.inference_mode():
            logits = hf(input_ids=ids, position_ids=positions, attention_mask=mask, cache=slots.cache,
                        use_cache=True).logits
            if logits.is_cuda:
                torch.cuda.synchronize(logits.device)
        model_seconds += time.perf_counter() - start
        return logits

    # Prompt processing: every context token except the last (one NFE per sequence).
    context = int((lengths - 1).max())
    if context:
        cols = torch.arange(context, device=device)
        real = cols[None, :] < (lengths - 1)[:, None]                               # (N, C)
        ids = torch.where(real, buffer[:, :context], 0)
        visible = (cols[None, :, None] >= cols[None, None, :]) & real[:, None, :]   # causal, real keys
        visible |= torch.eye(context, dtype=torch.bool, device=device)[None]        # no empty row: no NaN
        forward(ids, cols[None, :].expand(n_seq, -1), visible)
        slots.append(real)
    steps = torch.arange(k + 1, device=device)
    causal = (steps[:, None] >= steps[None, :])[None]                               # (1, k+1, k+1)
    while live_host:
        n_live = live.numel()
        last = buffer[live, lengths[live] - 1]                                      # (N,)
        if k:
            prefixes = [buffer[b, : length_host[b]] for b in live_host]
            start = time.perf_counter()
            logits_d, _, _ = drafter.propose_batch(prefixes, k)                     # (N, k, V)
            drafter_seconds += time.perf_counter() - start
            draft = logits_d.argmax(-1)                                             # (N, k)
            ids = torch.cat([last[:, None], draft], 1)
        else:
            draft = None
            ids = last[:, None]
        positions = (lengths[live] - 1)[:, None] + steps[None, : k + 1]
        logits = forward(ids, positions, causal.expand(n_live, -1, -1))
        choice = logits.argmax(-1)                                                  # (N, k+1)
        if k:
            h = torch.cumprod((draft == choice[:, :k]).long(), 1).sum(1)            # matched drafts
        else:
            h = torch.zeros(n_live, dtype=torch.long, device=device)
        # Ending condition per sequence: a = min(h + 1, L - generated, first EOS + 1).
        room = max_new_tokens - (lengths[live] - prompt_lengths[live])
        a = torch.minimum(h + 1, room)
        if eos_token_id is not None:
            is_eos = (choice == eos_token_id) & (steps[None, :] < a[:, None])
            first = torch.where(is_eos.any(1), is_eos.long().argmax(1), k + 1)
            a = torch.minimum(a, first + 1)
            ended = is_eos.any(1)
        else:
            ended = torch.zeros_like(a, dtype=torch.bool)
        # All k + 1 choices are written; those past the new length are never read and are
        # overwritten later (the buffer has k + 2 spare columns).
        buffer[live[:, None], lengths[live][:, None] + steps[None, :]] = choice
        lengths[live] += a
        slots.append(steps[None, :] < a[:, None])           # [last, d^(1..a-1)] became verified
        done = ended | (lengths[live] - prompt_lengths[live] >= max_new_tokens)
        a_host, done_host = torch.stack([a, done.long()]).tolist()                  # the one host sync
        per_cycle.append((live_host, a_host))
        for b, appended in zip(live_host, a_host):
            length_host[b] += appended
        if any(done_host):
            kept = [j for j, d in enumerate(done_host) if not d]
            live_host = [live_host[j] for j in kept]
            keep = torch.tensor(kept, dtype=torch.long, device=device)
            live = live[keep]
            if live_host:
                slots.select(keep)
        # Valid slots per sequence = its verified length - 1, so the dead share is known on the host.
        if live_host and slots.valid.shape[1] > 64 and \
                sum(length_host[b] - 1 for b in live_host) < 0.5 * len(live_host) * slots.valid.shape[1]:
            slots.squeeze()
    wall = time.perf_counter() - started
    accepted: list[list[int]] = [[] for _ in range(n_seq)]
    for members, appended in per_cycle:
        for b, a_b in zip(members, appended):
            accepted[b].append(a_b)
    results = []
    for b, p in enumerate(items):
        prefill = 1 if p.numel() > 1 else 0                     # the prompt-processing call
        extras = {"drafter_nfe": len(accepted[b])} if k else {}
        results.append(DecodeResult(tokens=buffer[b, p.numel(): length_host[b]].tolist(),
                                    nfe=prefill + len(accepted[b]), accepted=accepted[b], rows_per_call=[],
                                    model_seconds=model_seconds + drafter_seconds, wall_seconds=wall, extras=extras))
    totals = {"wall_seconds": wall, "model_seconds": model_seconds + drafter_seconds,
              "target_seconds": model_seconds, "drafter_seconds": drafter_seconds,
              "tokens": int(sum(len(r.tokens) for r in results)), "cycles": len(per_cycle), "batch": n_seq}
    return results, totals


def batch_throughput(target, drafter, prompts: list, *, batch_sizes, width: int, max_new_tokens: int,
                     eos_token_id: int | None = None, progress: bool = True):
    """Tokens/s of ``ar`` and ``deer`` at each batch size (seed 001, Table 5), with a KV cache.

    The prompts are cut into consecutive batches of each size (a last partial batch is
    dropped, so every size decodes the same number of prompts only when it divides it);
    the two methods alternate batch by batch.  Returns ``(table, outputs)``: per
    (batch size, method) tokens, wall seconds and tokens/s; and per (batch size, method,
    prompt) the output tokens, for the identity check against batch size 1.
    """
    import pandas as pd
    from tqdm.auto import tqdm

    decode_batch(target, prompts[:2], schedule="deer", width=width, max_new_tokens=8, drafter=drafter)  # warm-up
    rows, outputs = [], []
    jobs = [(size, start) for size in batch_sizes for start in range(0, len(prompts) - size + 1, size)]
    for n, (size, start) in enumerate(tqdm(jobs, desc="batched decoding", disable=not progress)):
        chunk = prompts[start: start + size]
        for schedule in (("ar", "deer") if n % 2 == 0 else ("deer", "ar")):
            results, totals = decode_batch(target, chunk, schedule=schedule, width=width, max_new_tokens=max_new_tokens,
                                           drafter=drafter if schedule == "deer" else None, eos_token_id=eos_token_id)
            rows.append({"batch": size, "method": schedule, **totals})
            outputs += [{"batch": size, "method": schedule, "prompt": start + j, "output": tuple(r.tokens),
                         "accepted": tuple(r.accepted)} for j, r in enumerate(results)]
    table = pd.DataFrame(rows).groupby(["batch", "method"], sort=False)[["tokens", "wall_seconds", "cycles"]].sum()
    table["tokens_per_s"] = table["tokens"] / table["wall_seconds"]
    return table.reset_index(), pd.DataFrame(outputs)
