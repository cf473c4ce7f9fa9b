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

import time

import numpy as np
import torch

from . import masks
from .models import CallOutput, VerifiedCache


class MarkovLM:
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
        self.max_positions = None
        self.device = torch.device("cpu")
        rng = np.random.default_rng(seed)
        self.n_states = vocab_size ** order
        self.transition = rng.dirichlet(np.full(vocab_size, float(concentration)), size=self.n_states)  # (S, V)
        self._marginals = [self.transition]          # _marginals[i]: (S, V), (i+1)-step-ahead
        self._draft = np.empty((0, self.n_states, vocab_size))
        with np.errstate(divide="ignore"):
            self._log_target = torch.from_numpy(np.log(self.transition))
        self._log_draft = torch.empty((0, self.n_states, vocab_size), dtype=torch.float64)
        self._state = VerifiedCache()

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
        """Extend the marginal and draft tables to ``width`` steps ahead."""
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
            self._draft = np.concatenate([self._draft, np.stack(new)])
            with np.errstate(divide="ignore"):
                self._log_draft = torch.from_numpy(np.log(self._draft))

    def next_token_probs(self, context) -> np.ndarray:
        """``(V,)`` p_target(. | context)."""
        return self.transition[self.state_of(context)].copy()

    def draft_probs(self, context, width: int) -> np.ndarray:
        """``(width, V)``: row i is q_draft^(i+1)(. | context), the (i+1)-step-ahead draft."""
        self._ensure_width(width)
        return self._draft[:width, self.state_of(context)].copy()

    def marginal_probs(self, context, width: int) -> np.ndarray:
        """``(width, V)``: the exact (noise-free) i-step-ahead marginals."""
        self._ensure_width(width)
        return np.stack([self._marginals[i][self.state_of(context)] for i in range(width)])

    # ----- the model-call seam -----------------------------------------------------------
    def reset(self) -> None:
        self._state = VerifiedCache()

    def call(self, kind: str, prefix: torch.Tensor, draft: torch.Tensor, width: int) -> CallOutput:
        """Answer one schedule call exactly (log-probabilities; rows as the neural layout)."""
        context, _ = self._state.split_prefix(prefix)
        start = time.perf_counter()
        if prefix.numel() < self.order:
            raise ValueError(f"prompt_ids must have at least order={self.order} tokens")
        m = 0 if kind == "linear_draft" else int(draft.numel())
        # States after P, d^(1), ..., d^(m): the contexts of the m + 1 verify positions.
        stream = torch.cat([prefix[-self.order:], draft[:m]]) if m else prefix[-self.order:]
        states = self._states(stream)                                 # (m + 1,)
        target = None if kind == "linear_draft" else self._log_target[states]
        drafts = None
        if kind in ("linear_draft", "packed"):
            self._ensure_width(width)
            drafts = self._log_draft[:width, states[:1]].transpose(0, 1)          # (1, W, V)
        elif kind == "quadratic":
            self._ensure_width(width + 1)
            drafts = self._log_draft[: width + 1, states].transpose(0, 1)         # (m+1, B, V)
        seconds = time.perf_counter() - start
        rows = masks.layout_rows(kind, int(context.numel()), m, width)
        self._state.record(int(context.numel()), kind != "linear_draft", rows)
        return CallOutput(target, drafts, rows, seconds)

    def commit(self, n_appended: int) -> None:
        self._state.keep(n_appended)

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
