"""Any-order greedy decoding (seed 000, App. C, Algorithm 3) for Linear-SS, Packed-SS and
Quadratic-SS, SetDLM's native threshold decoder (App. E.6), and the serial reference of
Proposition C.1.

Output positions are fixed after the prompt (0-based here; the paper numbers them from 1).
Each iteration:

  1. the active window starts at the leftmost unresolved position ell <= E and holds the
     unresolved positions U_t of ``ell .. ell + W - 1`` (Algorithm 3, lines 3-4);
  2. the order policy fixes pi_t over U_t before the call (line 5); ``kappa`` counts the
     leading ranks that hold a draft token (line 6);
  3. one call (Packed, Quadratic) or two (Linear: draft ``[N | R]``, then verify ``[O | M]``)
     give the verifier's prediction at every rank and the next draft (lines 7-8), with the
     layouts of :mod:`spec_lib.masks.anyorder`;
  4. h = leading matches, A_t = min(h + 1, u) pairs accepted in rank order (lines 9-10);
     an accepted EOS at j sets E = min(E, j), and so does a fully accepted stop sequence (its
     final position, App. E.2); pairs after E are discarded (lines 11-13);
  5. predictions at positions of U_t still unresolved become the next draft (lines 14-15):
     Packed's R rows, Quadratic's branch h (it assumes ranks 1..h accepted).

Only N and the accepted O rows enter the cache (App. D.2).  If a new E discards pairs that
are already cached, the cache is cropped when they are its tail, else rebuilt by one counted
prefill of the prompt and the kept pairs in acceptance order (exact: every cached row then
saw exactly the kept context).

Confidence scores (App. E.6): Packed and Quadratic score a position by the probability of
its draft token when it was proposed (Quadratic: the selected branch); Linear by the
verifier's top probability there in the previous iteration.  Positions are ranked by
decreasing score, ties by position, positions without a finite score last in textual order
(so the first iteration is left to right).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import lru_cache

import torch

from ..masks.anyorder import ABLATIONS, build_any_order
from .state import DecodeResult
from .stops import check_stop_sequences, earliest_stop

#: schedules that run under ``order=`` (:func:`spec_lib.decode` on an any-order model)
ANY_ORDER_SCHEDULES = ("linear", "packed", "quadratic", "native")
#: built-in verification orders
ORDERS = ("ltr", "confidence")
#: the seam an any-order model implements (:mod:`spec_lib.anyorder_models`)
ANY_ORDER_SEAM = ("prefill", "call", "commit", "crop", "conditional", "reset", "mask_token_id", "vocab_size")


def ltr_order(positions: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """Left to right: the window's unresolved positions as they are."""
    return positions


def confidence_order(positions: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """Decreasing score, ties by position, missing (non-finite) scores last in textual order."""
    key = torch.where(torch.isfinite(scores), scores, torch.full_like(scores, -torch.inf))
    return positions[torch.sort(key, descending=True, stable=True).indices]


def _policy(order) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    if isinstance(order, str):
        if order not in ORDERS:
            raise ValueError(f"order must be one of {list(ORDERS)} or a callable policy, got {order!r}")
        return {"ltr": ltr_order, "confidence": confidence_order}[order]
    if callable(order):
        return order
    raise ValueError(f"order must be one of {list(ORDERS)} or a callable policy, got {type(order).__name__}")


def _ordered(policy, window: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """The policy's permutation of ``window``, checked (the built-in orders are permutations
    by construction and write into neither argument, so they are neither checked nor given
    copies)."""
    if policy is ltr_order:
        return window
    if policy is confidence_order:
        return confidence_order(window, scores)
    pi = policy(window.clone(), scores.clone())
    pi = torch.as_tensor(pi)
    if (pi.dim() != 1 or pi.dtype not in (torch.int64, torch.int32) or pi.numel() != window.numel()
            or not torch.equal(torch.sort(pi.long()).values, window)):
        raise ValueError(f"the order policy must return a permutation of the window's unresolved positions "
                         f"{window.tolist()}, got {pi.tolist() if pi.dim() <= 1 else pi.shape}")
    return pi.long()


@lru_cache(maxsize=64)
def _index(value: int, device: torch.device) -> torch.Tensor:
    """``tensor([value])`` on ``device``, built once (read-only)."""
    return torch.tensor([value], device=device)


def _predict(logits: torch.Tensor, mask_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Argmax and its probability per row (MASK is never predicted); rows are independent,
    so predicting a block of rows at once equals predicting them one group at a time."""
    logits = logits.double()
    if mask_token_id < logits.shape[-1]:
        logits = logits.index_fill(-1, _index(mask_token_id, logits.device), -torch.inf)
    probs = logits.softmax(-1)
    best = probs.max(-1)
    return best.indices, best.values


class _AnyOrderRun:
    """State of one any-order decode (Algorithm 3's P, D, E and the statistics)."""

    def __init__(self, model, prompt, width, limit, eos, stops, trace, ablation):
        self.model, self.prompt, self.width, self.eos, self.stops = model, prompt, width, eos, stops
        self.ablation = ablation
        self.n = prompt.numel()
        self.out = torch.full((limit,), -1, dtype=torch.long)           # P's output pairs, -1 = unresolved
        self.draft = torch.full((limit,), -1, dtype=torch.long)         # D
        self.score = torch.full((limit,), torch.nan, dtype=torch.float64)
        self.end = limit - 1                                           # E (0-based)
        self.new_pos: list[int] = []                                   # N: accepted, not yet processed
        self.cached: list[int] = []                                    # output positions in cache order
        self.nfe, self.rows, self.accepted, self.model_seconds = 0, [], [], 0.0
        self.rebuilds = 0
        self.call_seconds: list[float] = []
        self.call_kinds: list[str] = []                                # "prefill" or a layout kind
        self.trace = [] if trace else None

    def counted(self, rows: int, seconds: float, kind: str) -> None:
        self.nfe += 1
        self.rows.append(rows)
        self.call_kinds.append(kind)
        self.call_seconds.append(seconds)
        self.model_seconds += seconds

    def window(self) -> torch.Tensor | None:
        unresolved = (self.out[: self.end + 1] < 0).nonzero()[:, 0]
        if not unresolved.numel():
            return None
        return unresolved[unresolved < int(unresolved[0]) + self.width]

    def new_rows(self):
        pos = torch.tensor(self.new_pos, dtype=torch.long)
        return self.out[pos], pos + self.n

    def accept(self, positions: torch.Tensor, tokens: torch.Tensor, n_new_cached: list[int]) -> int:
        """Store accepted pairs, apply EOS and stop sequences, discard pairs after E, and fix
        the cache; returns how many accepted pairs survive."""
        self.cached += n_new_cached
        self.out[positions] = tokens
        if self.eos is not None:
            eos_at = positions[tokens == self.eos]
            if eos_at.numel():
                self.end = min(self.end, int(eos_at.min()))
        if self.stops:
            stop = earliest_stop(self.out[: self.end + 1], self.stops)
            if stop is not None:
                self.end = min(self.end, stop)
        self.out[self.end + 1:] = -1
        self.draft[self.end + 1:] = -1
        self.new_pos = [p for p in self.new_pos if p <= self.end]
        kept = [p for p in self.cached if p <= self.end]
        if len(kept) < len(self.cached):
            if self.cached[: len(kept)] == kept:                       # the discarded pairs are the tail
                self.model.crop(self.n + len(kept))
            else:                                                      # rebuild: one counted prefill
                self.rebuilds += 1
                self.model.reset()
                pos = torch.tensor(kept, dtype=torch.long)
                self.counted(self.n + len(kept), self.model.prefill(torch.cat([self.prompt, self.out[pos]]),
                                                                    torch.cat([torch.arange(self.n), pos + self.n])),
                             "prefill")
            self.cached = kept
        return int((positions <= self.end).sum())

    def result(self, started: float, schedule: str, order) -> DecodeResult:
        tokens = self.out[: self.end + 1].tolist()
        extras = {"schedule": schedule, "order": order if isinstance(order, str) else "policy",
                  "cache_rebuilds": self.rebuilds, "call_seconds": self.call_seconds, "call_kinds": self.call_kinds}
        if self.trace is not None:
            extras["trace"] = self.trace
        return DecodeResult(tokens, self.nfe, self.accepted, self.rows, self.model_seconds,
                            time.perf_counter() - started, extras)


def order_policy(order) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The policy ``order`` names (``"ltr"``, ``"confidence"``) or is (a callable ``(positions,
    scores) -> permutation of positions``); ValueError otherwise."""
    return _policy(order)


def check_order(policy, width: int, max_new_tokens: int) -> None:
    """Try ``policy`` on a first window (before any model call): it must return a permutation."""
    if max_new_tokens:
        first = torch.arange(min(width, max_new_tokens))
        _ordered(policy, first, torch.full((first.numel(),), torch.nan, dtype=torch.float64))


def run_any_order(model, prompt: torch.Tensor, *, schedule: str, width: int, max_new_tokens: int, order,
                  eos_token_id: int | None, stops: list[torch.Tensor], threshold: float, trace: bool,
                  ablation: str | None, started: float) -> DecodeResult:
    """Greedy any-order decoding with one schedule (Algorithm 3; see the module docstring), on
    arguments :func:`spec_lib.schedules.validation.validate` has checked.

    ``order``: ``"ltr"``, ``"confidence"`` or a policy ``(positions, scores) -> permutation of
    positions`` (``positions`` ascending output positions of U_t, ``scores`` their confidence
    scores, NaN where none); ignored by ``native``.  ``stops``: token-id tensors; a marker is
    recognised once all its tokens are accepted and E becomes its final position (App. E.2).
    ``threshold``: the native decoder's confidence threshold (App. E.6: 0.9).  ``trace``:
    record per iteration the order, kappa, h, A_t and the next draft in ``extras["trace"]``
    (what :func:`serial_reference` replays).  ``ablation``: a deliberately wrong mask
    (:data:`spec_lib.masks.anyorder.ABLATIONS`).

    Returns a :class:`~spec_lib.schedules.state.DecodeResult`; ``tokens`` are the output positions
    0..E in textual order (the prompt excluded), ``nfe`` counts the prompt's call.
    """
    policy = _policy(order)
    prompt = prompt.long().cpu()
    run = _AnyOrderRun(model, prompt, width, max_new_tokens, eos_token_id, stops, trace, ablation)
    model.reset()
    if max_new_tokens:
        run.counted(prompt.numel(), model.prefill(prompt, torch.arange(prompt.numel())), "prefill")
        step = _native_step if schedule == "native" else _speculative_step
        while (window := run.window()) is not None:
            step(run, schedule, policy, window, threshold)
    return run.result(started, schedule, order)


def _speculative_step(run: _AnyOrderRun, schedule: str, policy, window: torch.Tensor, threshold: float) -> None:
    model, mask_id = run.model, run.model.mask_token_id
    pi = _ordered(policy, window, run.score[window])
    u = pi.numel()
    new_ids, new_positions = run.new_rows()
    p = new_ids.numel()
    if schedule == "linear":                                     # call 1: [N | R] drafts from P_{t-1}
        lay = build_any_order("ao_linear_draft", new_ids=new_ids, new_positions=new_positions,
                              order_positions=pi + run.n, draft_ids=pi.new_full((u,), -1), mask_token_id=mask_id,
                              ablation=run.ablation)
        logits, seconds = model.call(lay)
        run.counted(lay.rows, seconds, lay.kind)
        model.commit(p)
        run.cached += run.new_pos
        run.new_pos, p = [], 0
        drafts = _predict(logits, mask_id)[0]
        lay = build_any_order("ao_linear_verify", new_ids=new_ids[:0], new_positions=new_positions[:0],
                              order_positions=pi + run.n, draft_ids=drafts, mask_token_id=mask_id,
                              ablation=run.ablation)
    else:
        drafts = run.draft[pi]
        lay = build_any_order("ao_packed" if schedule == "packed" else "ao_quadratic", new_ids=new_ids,
                              new_positions=new_positions, order_positions=pi + run.n, draft_ids=drafts,
                              mask_token_id=mask_id, ablation=run.ablation)
    logits, seconds = model.call(lay)
    run.counted(lay.rows, seconds, lay.kind)
    if schedule == "packed":                                     # M rows and R rows, predicted together
        tokens_all, probs_all = _predict(logits, mask_id)
        verified, top = tokens_all[:u], probs_all[:u]
    else:
        verified, top = _predict(logits[:u], mask_id)            # v at every rank (rows M_1..M_u)
    h = int(((drafts == verified) & (drafts >= 0)).long().cumprod(0).sum())
    accepted = min(h + 1, u)
    model.commit(p + h)                                          # N and the accepted O rows
    cached = run.new_pos + pi[:h].tolist()
    run.new_pos = [int(pi[h])] if h < u else []                  # the correction, processed next call
    branch = 0
    if schedule == "linear":
        next_tokens, next_scores = None, top                     # Linear: the verifier's top probability
    elif schedule == "packed":
        next_tokens, next_scores = tokens_all[u:], probs_all[u:]
    else:                                                        # Quadratic: only the selected branch
        branch = min(h, u - 1)
        next_tokens, next_scores = _predict(logits[u:].reshape(-1, u, logits.shape[-1])[branch], mask_id)
    survived = run.accept(pi[:accepted], verified[:accepted], cached)
    run.accepted.append(survived)
    rest = torch.zeros(u, dtype=torch.bool)
    rest[accepted:] = True
    rest &= pi <= run.end                                        # J_t: still unresolved, before E
    run.draft.fill_(-1)
    run.score.fill_(torch.nan)
    if next_tokens is not None:
        run.draft[pi[rest]] = next_tokens[rest]
    run.score[pi[rest]] = next_scores[rest]
    if run.trace is not None:
        kappa = int((drafts >= 0).long().cumprod(0).sum())
        run.trace.append({"order": pi.tolist(), "kappa": kappa, "h": h, "accepted": accepted, "end": run.end,
                          "drafts": drafts.tolist(), "verified": verified[: min(kappa + 1, u)].tolist(),
                          "drafted": ({int(j): int(t) for j, t in zip(pi[rest], next_tokens[rest])}
                                      if next_tokens is not None else dict(zip(pi.tolist(), drafts.tolist()))),
                          "draft_context": branch if schedule == "quadratic" else 0})


def _native_step(run: _AnyOrderRun, schedule: str, policy, window: torch.Tensor, threshold: float) -> None:
    """SetDLM's sliding-window decoder (App. E.6): W masks, argmax, commit the most confident
    position and every position whose probability is at least ``threshold``."""
    model, mask_id = run.model, run.model.mask_token_id
    new_ids, new_positions = run.new_rows()
    lay = build_any_order("ao_native", new_ids=new_ids, new_positions=new_positions, order_positions=window + run.n,
                          draft_ids=window.new_full((window.numel(),), -1), mask_token_id=mask_id)
    logits, seconds = model.call(lay)
    run.counted(lay.rows, seconds, lay.kind)
    model.commit(new_ids.numel())
    cached, run.new_pos = list(run.new_pos), []
    tokens, probs = _predict(logits, mask_id)
    commit = probs >= threshold
    commit[probs.argmax()] = True
    positions = window[commit]
    run.new_pos = positions.tolist()
    run.accepted.append(run.accept(positions, tokens[commit], cached))
    if run.trace is not None:
        run.trace.append({"order": window.tolist(), "committed": positions.tolist(), "end": run.end})


def serial_reference(model, prompt_ids, trace: list[dict], *, max_new_tokens: int, eos_token_id: int | None = None,
                     stop_sequences=None) -> tuple[list[int], list[dict]]:
    """Proposition C.1's serial reference, replaying a traced run's orders and A_t.

    In iteration t it generates A_t tokens greedily at pi_t(1..A_t), each conditioned on its
    own P_{t-1} (in acceptance order) and the tokens generated earlier in that group, with the
    same EOS / stop-sequence / truncation rules; and, for the drafts, the drafter's argmax at
    every retained position from P_{t-1} (Packed, Linear) or from P_{t-1} plus the accepted
    drafts of ranks <= h (Quadratic's selected branch) is what the next draft must be.

    Returns:
        (tokens, per iteration the drafts ``{position: token}`` the drafter must have produced)
        for comparison with the run's ``tokens`` and ``trace[t]["drafted"]``.
    """
    prompt = torch.as_tensor(prompt_ids).long().cpu()
    n = prompt.numel()
    stops = check_stop_sequences(stop_sequences, max(max_new_tokens, 1))
    out = torch.full((max_new_tokens,), -1, dtype=torch.long)
    end, order_of_acceptance, expected_drafts = max_new_tokens - 1, [], []
    mask_id = model.mask_token_id

    def context(extra_pos: list[int], extra_tok: list[int]):
        pos = torch.tensor(order_of_acceptance + extra_pos, dtype=torch.long)
        tok = torch.cat([out[pos[: len(order_of_acceptance)]], torch.tensor(extra_tok, dtype=torch.long)])
        return torch.cat([prompt, tok]), torch.cat([torch.arange(n), pos + n])

    for step in trace:
        pi, accepted = step["order"], step["accepted"]
        group_tok: list[int] = []
        for r in range(accepted):
            tokens, positions = context(pi[:r], group_tok)
            logits = model.conditional(tokens, positions, torch.tensor([pi[r] + n]))
            group_tok.append(int(_predict(logits, mask_id)[0][0]))
        drafted = list(step["drafted"])                          # the drafter's argmax from P_{t-1}
        if drafted:                                              # (and Quadratic's ranks <= h)
            branch = step["draft_context"]
            tokens, positions = context(pi[:branch], step["drafts"][:branch])
            logits = model.conditional(tokens, positions, torch.tensor(drafted) + n)
            expected_drafts.append(dict(zip(drafted, _predict(logits, mask_id)[0].tolist())))
        else:
            expected_drafts.append({})
        positions_t = torch.tensor(pi[:accepted], dtype=torch.long)
        tokens_t = torch.tensor(group_tok, dtype=torch.long)
        out[positions_t] = tokens_t
        order_of_acceptance += pi[:accepted]
        if eos_token_id is not None and (tokens_t == eos_token_id).any():
            end = min(end, int(positions_t[tokens_t == eos_token_id].min()))
        if stops:
            stop = earliest_stop(out[: end + 1], stops)
            if stop is not None:
                end = min(end, stop)
        out[end + 1:] = -1
        order_of_acceptance = [j for j in order_of_acceptance if j <= end]
    return out[: end + 1].tolist(), expected_drafts


def serial_greedy(model, prompt_ids, *, max_new_tokens: int, eos_token_id: int | None = None,
                  stop_sequences=None) -> list[int]:
    """The model's plain serial left-to-right greedy decode: one position at a time, each
    predicted by a mask row that sees the prompt and every earlier output token (no cache, no
    speculation); stops at EOS or a stop sequence (included)."""
    prompt = torch.as_tensor(prompt_ids).long().cpu()
    n = prompt.numel()
    stops = check_stop_sequences(stop_sequences, max(max_new_tokens, 1))
    out: list[int] = []
    while len(out) < max_new_tokens:
        tokens = torch.cat([prompt, torch.tensor(out, dtype=torch.long)])
        logits = model.conditional(tokens, torch.arange(tokens.numel()), torch.tensor([n + len(out)]))
        out.append(int(_predict(logits, model.mask_token_id)[0][0]))
        if out[-1] == eos_token_id or (stops and earliest_stop(torch.tensor(out), stops) is not None):
            break
    return out
