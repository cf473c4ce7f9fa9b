"""Batched greedy decoding with per-sequence acceptance: AR and DEER (seed 001, RQ3, Table 5).

Reference: seed 001, Sec. 4.4 "Batch inference": several sequences decode together, each
accepting its own number of draft tokens per cycle.  The paper ran both methods without a
KV cache (Table 5); here the target keeps one, or with ``kv_cache=False`` runs each sequence's
whole verified prefix again in every call, as the paper did (:func:`_uncached_logits`).

Ragged lengths are handled with **slots**: the target's cache has one column per slot,
shared by all sequences, and a boolean ``valid`` matrix says which slots of each sequence
hold verified tokens.  Every cycle appends k + 1 slots for every live sequence ([last,
d^(1..k)], each at its own position ids) and marks the first a_b of them valid: the same
"keep the verified prefix except its last token" rule as :class:`spec_lib.models.VerifiedCache`.
Invalid slots are masked out (:func:`spec_lib.masks.predicates.slot_visible`) and squeezed
out when they make up half the cache; finished sequences leave the batch.  One host sync
per cycle.

The first cycle's call also processes each prompt (all its tokens but the last, right-padded,
causal over its own real tokens), as :func:`spec_lib.decode`'s first call does, so a batched
sequence counts the same NFE as the same sequence decoded alone.

:func:`spec_lib.decode_batch` = the one validator, then :func:`run_batch`: :func:`_cycle` until
every sequence stops, then :func:`_results`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from .masks.predicates import causal_visible, padded_visible, slot_visible, to_additive
from .schedules import DecodeResult



class _SlotCache:
    """A transformers ``DynamicCache`` plus per-sequence slot validity."""

    def __init__(self, config, batch: int, device: torch.device) -> None:
        from transformers import DynamicCache

        self.cache = DynamicCache(config=config)
        self.valid = torch.zeros(batch, 0, dtype=torch.bool, device=device)

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


@dataclass
class _Batch:
    """State of one batched decode (host-side lists avoid per-sequence device syncs)."""

    target: object
    drafter: object
    k: int
    max_new_tokens: int
    eos: int | None
    items: list[torch.Tensor]
    buffer: torch.Tensor                       # (N, longest prompt + L + k + 2) token ids
    lengths: torch.Tensor                      # (N,) verified lengths, on the device
    prompt_lengths: torch.Tensor
    slots: _SlotCache
    live: torch.Tensor                         # sequences still in the batch, on the device
    live_host: list[int]
    length_host: list[int]
    per_cycle: list[tuple[list[int], list[int]]] = field(default_factory=list)   # (live, appended)
    model_seconds: float = 0.0
    drafter_seconds: float = 0.0
    kv_cache: bool = True

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, new_visible: torch.Tensor) -> torch.Tensor:
        """Target forward of new rows over the slot cache (one NFE per live sequence)."""
        dtype = self.target.dtype
        mask = to_additive(slot_visible(self.slots.valid, new_visible), dtype)[:, None]   # (N, 1, n, slots+n)
        start = time.perf_counter()
        with torch.inference_mode():
            logits = self.target.hf_model(input_ids=ids, position_ids=positions, attention_mask=mask,
                                          cache=self.slots.cache, use_cache=True).logits
            if logits.is_cuda:
                torch.cuda.synchronize(logits.device)
        self.model_seconds += time.perf_counter() - start
        return logits


def run_batch(target, drafter, request, eos: int | None, started: float, kv_cache: bool = True) -> list[DecodeResult]:
    """Decode the checked ``request`` (:func:`spec_lib.schedules.validation.validate`) in one
    batch; one :class:`DecodeResult` per prompt (see :func:`spec_lib.decode_batch`)."""
    if not hasattr(target, "hf_model"):
        raise TypeError(f"target must be a spec_lib.models.DualModeLM, got {type(target).__name__}")
    if drafter is not None and getattr(drafter, "draft_logits_batch", None) is None:
        raise ValueError(f"decode_batch drafts with draft_logits_batch (spec_lib.drafters.DiffusionDrafter), got "
                         f"{type(drafter).__name__}")
    state = _start(target, drafter, request.prompts, request.width if drafter is not None else 0,
                   request.max_new_tokens, eos)
    state.kv_cache = kv_cache
    first = True
    while state.live_host:
        _cycle(state, first)
        first = False
    return _results(state, time.perf_counter() - started)


def _start(target, drafter, items, k, max_new_tokens, eos) -> _Batch:
    device = target.device
    target.hf_model.eval()
    if drafter is not None:
        drafter.reset()
    n_seq = len(items)
    lengths = torch.tensor([p.numel() for p in items], device=device)
    buffer = torch.zeros(n_seq, int(lengths.max()) + max_new_tokens + k + 2, dtype=torch.long, device=device)
    for b, p in enumerate(items):
        buffer[b, : p.numel()] = p
    return _Batch(target, drafter, k, max_new_tokens, eos, items, buffer, lengths, lengths.clone(),
                  _SlotCache(target.hf_model.config, n_seq, device), torch.arange(n_seq, device=device),
                  list(range(n_seq)) if max_new_tokens else [], [p.numel() for p in items])


def _context_rows(state: _Batch):
    """The first call's prompt rows: every prompt token but the last, right-padded to the longest
    (``ids``, ``positions``, which are real, and the rows' causal visibility over real keys)."""
    context = int((state.lengths - 1).max())
    device = state.buffer.device
    cols = torch.arange(context, device=device)
    real = cols[None, :] < (state.lengths - 1)[:, None]                              # (N, C) right-padded
    ids = torch.where(real, state.buffer[:, :context], 0)
    return ids, cols[None, :].expand(real.shape[0], -1), real, padded_visible(state.lengths - 1, context, causal=True)


def _uncached_logits(state: _Batch, new: torch.Tensor) -> torch.Tensor:
    """Without a KV cache (seed 001, Table 5): each live sequence's verified prefix but its last
    token, then its ``new`` rows ``(N, k + 1)`` = [last, d^(1..k)], right-padded and causal, in
    one call; the logits ``(N, k + 1, V)`` of the new rows."""
    live = state.live
    before = state.lengths[live] - 1                                                 # (N,) rows before `last`
    rows = before[:, None] + torch.arange(new.shape[1], device=new.device)[None, :]  # (N, k+1)
    width = int(rows.max()) + 1
    cols = torch.arange(width, device=new.device)
    ids = torch.where(cols[None, :] < before[:, None], state.buffer[live, :width], 0).scatter(1, rows, new)
    visible = padded_visible(before + new.shape[1], width, causal=True)
    mask = to_additive(visible, state.target.dtype)[:, None]
    start = time.perf_counter()
    with torch.inference_mode():
        logits = state.target.hf_model(input_ids=ids, position_ids=cols[None, :].expand(ids.shape[0], -1),
                                       attention_mask=mask, use_cache=False).logits
        if logits.is_cuda:
            torch.cuda.synchronize(logits.device)
    state.model_seconds += time.perf_counter() - start
    return logits.gather(1, rows[..., None].expand(-1, -1, logits.shape[-1]))


def _cycle(state: _Batch, first: bool = False) -> None:
    """One draft-verify cycle of every live sequence (the first also processes the prompts); the
    one host sync of the cycle."""
    k, live, device = state.k, state.live, state.buffer.device
    n_live = live.numel()
    steps = torch.arange(k + 1, device=device)
    last = state.buffer[live, state.lengths[live] - 1]                               # (N,)
    if k:
        prefixes = [state.buffer[b, : state.length_host[b]] for b in state.live_host]
        start = time.perf_counter()
        logits_d = state.drafter.draft_logits_batch(prefixes, k).logits              # (N, k, V)
        state.drafter_seconds += time.perf_counter() - start
        draft = logits_d.argmax(-1)                                                 # (N, k)
        ids = torch.cat([last[:, None], draft], 1)
    else:
        draft = None
        ids = last[:, None]
    if state.kv_cache:
        positions = (state.lengths[live] - 1)[:, None] + steps[None, :]
        visible = causal_visible(k + 1, device)[None].expand(n_live, -1, -1)
        context = 0
        if first and int((state.lengths - 1).max()):                                # every sequence is live
            ctx_ids, ctx_pos, real, ctx_visible = _context_rows(state)
            context = ctx_ids.shape[1]
            ids, positions = torch.cat([ctx_ids, ids], 1), torch.cat([ctx_pos, positions], 1)
            visible = torch.cat([torch.cat([ctx_visible, ctx_visible.new_zeros(n_live, context, k + 1)], 2),
                                 torch.cat([real[:, None, :].expand(-1, k + 1, -1), visible], 2)], 1)
        logits = state.forward(ids, positions, visible)[:, context:]
        if context:
            state.slots.append(real)
    else:
        logits = _uncached_logits(state, ids)
    choice = logits.argmax(-1)                                                      # (N, k+1)
    if k:
        h = torch.cumprod((draft == choice[:, :k]).long(), 1).sum(1)                # matched drafts
    else:
        h = torch.zeros(n_live, dtype=torch.long, device=device)
    # Ending condition per sequence: a = min(h + 1, L - generated, first EOS + 1).
    room = state.max_new_tokens - (state.lengths[live] - state.prompt_lengths[live])
    a = torch.minimum(h + 1, room)
    if state.eos is not None:
        is_eos = (choice == state.eos) & (steps[None, :] < a[:, None])
        first = torch.where(is_eos.any(1), is_eos.long().argmax(1), k + 1)
        a = torch.minimum(a, first + 1)
        ended = is_eos.any(1)
    else:
        ended = torch.zeros_like(a, dtype=torch.bool)
    # All k + 1 choices are written; those past the new length are never read and are
    # overwritten later (the buffer has k + 2 spare columns).
    state.buffer[live[:, None], state.lengths[live][:, None] + steps[None, :]] = choice
    state.lengths[live] += a
    if state.kv_cache:
        state.slots.append(steps[None, :] < a[:, None])        # [last, d^(1..a-1)] became verified
    done = ended | (state.lengths[live] - state.prompt_lengths[live] >= state.max_new_tokens)
    a_host, done_host = torch.stack([a, done.long()]).tolist()                      # the one host sync
    state.per_cycle.append((state.live_host, a_host))
    for b, appended in zip(state.live_host, a_host):
        state.length_host[b] += appended
    if any(done_host):
        kept = [j for j, d in enumerate(done_host) if not d]
        state.live_host = [state.live_host[j] for j in kept]
        keep = torch.tensor(kept, dtype=torch.long, device=device)
        state.live = live[keep]
        if state.live_host and state.kv_cache:
            state.slots.select(keep)
    # Valid slots per sequence = its verified length - 1, so the dead share is known on the host.
    if state.kv_cache and state.live_host and state.slots.valid.shape[1] > 64 and \
            sum(state.length_host[b] - 1 for b in state.live_host) < 0.5 * len(state.live_host) * state.slots.valid.shape[1]:
        state.slots.squeeze()


def _results(state: _Batch, wall: float) -> list[DecodeResult]:
    """Per-sequence results (accepted per cycle, NFE) with the batch's totals in ``extras["batch"]``."""
    n_seq = len(state.items)
    accepted: list[list[int]] = [[] for _ in range(n_seq)]
    for members, appended in state.per_cycle:
        for b, a_b in zip(members, appended):
            accepted[b].append(a_b)
    total_model = state.model_seconds + state.drafter_seconds
    totals = {"wall_seconds": wall, "model_seconds": total_model, "target_seconds": state.model_seconds,
              "drafter_seconds": state.drafter_seconds,
              "tokens": int(sum(state.length_host[b] - p.numel() for b, p in enumerate(state.items))),
              "cycles": len(state.per_cycle), "batch": n_seq}
    results = []
    for b, p in enumerate(state.items):
        extras = {"batch": totals, **({"drafter_nfe": len(accepted[b])} if state.k else {})}
        results.append(DecodeResult(tokens=state.buffer[b, p.numel(): state.length_host[b]].tolist(),
                                    nfe=len(accepted[b]), accepted=accepted[b], rows_per_call=[],
                                    model_seconds=total_model, wall_seconds=wall, extras=extras))
    return results
