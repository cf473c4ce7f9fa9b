"""An exact toy model: a random order-k Markov chain as p_target, exact marginals as q_draft.

It answers the same calls as :class:`spec_lib.models.DualModeLM`, so every schedule runs
unchanged on it, and everything is known in closed form: it is the ground truth for the
proof-checking notebooks (seed 000, Theorems 3.2 and 3.3).

* p_target(. | context) = P[state], the state being the last ``order`` tokens.
* q_draft^(i)(. | context) = the exact (i+1)-step-ahead marginal of the chain given the
  context (matrix powers of the state chain), mixed with a fixed random distribution
  with weight ``draft_noise`` so that drafts can be imperfect.  A masked diffusion model
  that were perfect would output exactly these marginals (seed 000, Sec. 2.2 "Masked
  diffusion language models").

Calls return log-probabilities, so temperature acts on them exactly as on logits.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import torch

from . import masks
from .models import CallOutput, PerThreadState


_TABLES_LOCK = threading.Lock()        # extending a MarkovLM's lazily grown tables


class ExactModel(PerThreadState):
    """Base of exact toy models: answers the schedule calls of :mod:`spec_lib.models`.

    Subclasses give log-probabilities for the verify positions and for drafted positions;
    rows are counted as the neural layouts would evaluate them (App. D.3), and model time
    is the time spent computing the distributions.
    """

    vocab_size: int
    max_positions: int | None = None
    device = torch.device("cpu")
    order: int = 1

    def target_logprobs(self, prefix: torch.Tensor, draft: torch.Tensor) -> torch.Tensor:
        """``(m + 1, V)`` log p_target(. | prefix, draft[:i]) for i = 0..m."""
        raise NotImplementedError

    def draft_logprobs(self, prefix: torch.Tensor, draft: torch.Tensor, n_branches: int,
                       n_draft: int) -> torch.Tensor:
        """``(n_branches, n_draft, V)``: branch k drafts n_draft positions after (prefix, draft[:k])."""
        raise NotImplementedError

    def call(self, kind: str, prefix: torch.Tensor, draft: torch.Tensor, width: int) -> CallOutput:
        """Answer one schedule call exactly (log-probabilities; rows as the neural layout).

        The call kind's record (:func:`spec_lib.masks.call_kind`) says whether it verifies
        and how many blocks, of how many drafted positions, it holds: block k drafts after
        (prefix, draft[:k]).
        """
        spec = masks.call_kind(kind)
        context, _ = self.state.split_prefix(prefix)
        start = time.perf_counter()
        m = int(draft.numel()) if spec.verifies else 0
        draft = draft[:m]
        target = self.target_logprobs(prefix, draft) if spec.verifies else None
        n_blocks = spec.n_blocks(m)
        drafts = self.draft_logprobs(prefix, draft, n_blocks, spec.drafted(width)) if n_blocks else None
        seconds = time.perf_counter() - start
        rows = spec.rows(int(context.numel()), m, width)
        self.state.record(int(context.numel()), spec.verifies, rows)
        return CallOutput(target, drafts, rows, seconds)

    def commit(self, n_appended: int) -> None:
        self.state.keep(n_appended)


class MarkovLM(ExactModel):
    """Random order-k Markov language model with exact-marginal drafts.

    Args:
        vocab_size: V >= 2.
        order: k >= 1, the number of previous tokens the next token depends on.
        seed: seeds the transition rows (Dirichlet(1)) and the draft noise.
        eos_token_id: optional EOS id in [0, V); the chain itself ignores stopping.
        draft_noise: eta in [0, 1]; q^(i) = (1 - eta) * marginal^(i) + eta * noise^(i).
        concentration: Dirichlet concentration of the transition rows (smaller = peakier).
    """

    def __init__(self, vocab_size: int, order: int = 1, seed: int = 0, eos_token_id: int | None = None,
                 draft_noise: float = 0.0, concentration: float = 1.0) -> None:
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 2:
            raise ValueError(f"vocab_size must be an int >= 2, got {vocab_size!r}")
        if isinstance(order, bool) or not isinstance(order, int) or order < 1:
            raise ValueError(f"order must be an int >= 1, got {order!r}")
        if vocab_size ** order > 1_000_000:
            raise ValueError(f"vocab_size ** order must be <= 1e6 states, got {vocab_size}**{order}")
        if eos_token_id is not None and not (isinstance(eos_token_id, int) and 0 <= eos_token_id < vocab_size):
            raise ValueError(f"eos_token_id must be None or an int in [0, {vocab_size}), got {eos_token_id!r}")
        if not 0.0 <= float(draft_noise) <= 1.0:
            raise ValueError(f"draft_noise must be in [0, 1], got {draft_noise!r}")
        if not float(concentration) > 0:
            raise ValueError(f"concentration must be > 0, got {concentration!r}")
        self.vocab_size = vocab_size
        self.order = order
        self.seed = seed
        self.eos_token_id = eos_token_id
        self.draft_noise = float(draft_noise)
        rng = np.random.default_rng(seed)
        self.n_states = vocab_size ** order
        self.transition = rng.dirichlet(np.full(vocab_size, float(concentration)), size=self.n_states)  # (S, V)
        self._marginals = [self.transition]          # _marginals[i]: (S, V), (i+1)-step-ahead
        self._draft = np.empty((0, self.n_states, vocab_size))
        with np.errstate(divide="ignore"):
            self._log_target = torch.from_numpy(np.log(self.transition))
        self._log_draft = torch.empty((0, self.n_states, vocab_size), dtype=torch.float64)
        self.reset()

    # ----- exact distributions ---------------------------------------------------------
    def state_of(self, context) -> int:
        """Index of the state given by the last ``order`` tokens of ``context``."""
        tail = [int(t) for t in list(context)[-self.order:]]
        if len(tail) < self.order:
            raise ValueError(f"context must have at least order={self.order} tokens, got {len(tail)}")
        state = 0
        for tok in tail:
            state = state * self.vocab_size + tok
        return state

    def _states(self, tokens: torch.Tensor) -> torch.Tensor:
        """``(len - order + 1,)`` state index of every window of ``order`` tokens."""
        windows = tokens.unfold(0, self.order, 1)                     # (n_windows, order)
        weights = self.vocab_size ** torch.arange(self.order - 1, -1, -1)
        return (windows * weights).sum(-1)

    def _ensure_width(self, width: int) -> None:
        """Extend the marginal and draft tables to ``width`` steps ahead (thread-safe)."""
        if self._log_draft.shape[0] >= width:          # tables only grow; readers need no lock
            return
        with _TABLES_LOCK:
            self._extend(width)

    def _extend(self, width: int) -> None:
        while len(self._marginals) < width:
            prev = self._marginals[-1]                                # (S, V)
            if self.order == 1:
                nxt = self.transition @ prev
            else:
                # One step of the state chain: s -> (s[1:], x) with prob P[s, x].
                shifted = (np.arange(self.n_states) % (self.n_states // self.vocab_size)) * self.vocab_size
                nxt = np.einsum("sx,sxv->sv", self.transition,
                                prev[shifted[:, None] + np.arange(self.vocab_size)[None, :]])
            self._marginals.append(nxt)
        have = self._draft.shape[0]
        if have < width:
            new = []
            for i in range(have, width):
                noise = np.random.default_rng([self.seed, 1 + i]).dirichlet(
                    np.ones(self.vocab_size), size=self.n_states)
                new.append((1.0 - self.draft_noise) * self._marginals[i] + self.draft_noise * noise)
            draft = np.concatenate([self._draft, np.stack(new)])
            with np.errstate(divide="ignore"):
                self._log_draft = torch.from_numpy(np.log(draft))     # published first: the fast path reads it
            self._draft = draft

    def next_token_probs(self, context) -> np.ndarray:
        """``(V,)`` p_target(. | context)."""
        return self.transition[self.state_of(context)].copy()

    def draft_probs(self, context, width: int) -> np.ndarray:
        """``(width, V)``: row i is q_draft^(i+1)(. | context), the (i+1)-step-ahead draft."""
        self._ensure_width(width)
        with _TABLES_LOCK:                              # _draft is published after _log_draft
            return self._draft[:width, self.state_of(context)].copy()

    def _stream_states(self, prefix: torch.Tensor, draft: torch.Tensor) -> torch.Tensor:
        """``(m + 1,)`` states after P, d^(1), ..., d^(m)."""
        if prefix.numel() < self.order:
            raise ValueError(f"prompt_ids must have at least order={self.order} tokens")
        stream = torch.cat([prefix[-self.order:], draft]) if draft.numel() else prefix[-self.order:]
        return self._states(stream)

    def target_logprobs(self, prefix, draft):
        return self._log_target[self._stream_states(prefix, draft)]

    def draft_logprobs(self, prefix, draft, n_branches, n_draft):
        self._ensure_width(n_draft)
        states = self._stream_states(prefix, draft[: n_branches - 1])[:n_branches]
        return self._log_draft[:n_draft, states].transpose(0, 1)                    # (branches, n, V)

    def sample_sequences(self, n_sequences: int, length: int, seed: int = 0) -> torch.Tensor:
        """``(n, length)`` sequences drawn from the chain (uniform start state), e.g. training data."""
        rng = np.random.default_rng(seed)
        cdf = np.cumsum(self.transition, axis=1)                      # (S, V)
        out = np.empty((n_sequences, length), dtype=np.int64)
        out[:, : self.order] = rng.integers(0, self.vocab_size, (n_sequences, self.order))
        weights = self.vocab_size ** np.arange(self.order - 1, -1, -1)
        for t in range(self.order, length):
            states = out[:, t - self.order: t] @ weights
            u = rng.random(n_sequences)[:, None]
            out[:, t] = np.minimum((u > cdf[states]).sum(1), self.vocab_size - 1)
        return torch.from_numpy(out)


class ScriptedDrafterLM(ExactModel):
    """A greedy target with a fixed continuation and a drafter scripted by correctness.

    The target's greedy continuation after any prompt of ``prompt_len`` tokens is
    ``continuation`` (x_1, x_2, ...): p_target is a point mass on x_k at output position k
    (it depends on the context length only, which is all greedy decoding ever shows it).
    The drafter's prediction at position k from a context of c verified output tokens is
    x_k when correct and a wrong token otherwise, where correct means ``c >= c*_k`` for
    ``thresholds`` (Assumption 3.1, seed 000) or ``table[k, c]`` for an arbitrary table.

    Args:
        continuation: ``(K,)`` token ids x_1..x_K (K must cover L + W + 1 positions).
        vocab_size: V >= 2.
        prompt_len: length of the prompts it will be given.
        thresholds: ``(K + 1,)`` c*_k with c*_k <= k (index 0 unused), or
        table: ``(K + 1, K + 1)`` bool, correctness of position k from context c.
    """

    def __init__(self, continuation, vocab_size: int, prompt_len: int, thresholds=None, table=None) -> None:
        self.continuation = torch.as_tensor(np.asarray(continuation), dtype=torch.long)
        self.vocab_size = int(vocab_size)
        self.prompt_len = int(prompt_len)
        size = self.continuation.numel() + 1
        if (thresholds is None) == (table is None):
            raise ValueError("give exactly one of thresholds or table")
        if thresholds is not None:
            thresholds = torch.as_tensor(np.asarray(thresholds), dtype=torch.long)
            if thresholds.numel() != size or (thresholds > torch.arange(size)).any():
                raise ValueError(f"thresholds must have K + 1 = {size} entries with c*_k <= k")
            table = torch.arange(size)[None, :] >= thresholds[:, None]              # [k, c]
        self.table = torch.as_tensor(np.asarray(table), dtype=torch.bool)
        self._one_hot = torch.full((self.vocab_size, self.vocab_size), float("-inf"), dtype=torch.float64)
        self._one_hot.fill_diagonal_(0.0)                                            # log one-hot rows
        self.reset()

    def _token(self, positions: torch.Tensor) -> torch.Tensor:
        if int(positions.max()) > self.continuation.numel():
            raise ValueError(f"the scripted continuation has {self.continuation.numel()} tokens; "
                             f"position {int(positions.max())} was queried")
        return self.continuation[positions - 1]

    def target_logprobs(self, prefix, draft):
        c = prefix.numel() - self.prompt_len
        positions = c + 1 + torch.arange(draft.numel() + 1)
        return self._one_hot[self._token(positions)]

    def draft_logprobs(self, prefix, draft, n_branches, n_draft):
        c = prefix.numel() - self.prompt_len + torch.arange(n_branches)[:, None]    # (branches, 1)
        positions = c + 1 + torch.arange(n_draft)[None, :]                          # (branches, n)
        truth = self._token(positions)
        correct = self.table[positions, c.expand_as(positions)]
        tokens = torch.where(correct, truth, (truth + 1) % self.vocab_size)
        return self._one_hot[tokens]
