"""Drafting with Medusa, Hydra and EAGLE-3 on the target's verified hidden states (seed 001's baselines).

Reference: seed 001 (DEER), Sec. 4: each proposes k tokens that the target verifies with the
same rule as every other drafter (seed 001, Eq. 5-6), so decoding stays lossless whatever they
propose.  The networks are :mod:`~spec_lib.drafters.feature_heads`.

* Medusa (kind ``"diffusion"``, the ``drafted`` schedule): its heads do not see each other's
  proposals, so all k come from one pass; at T > 0 each is drawn from its head's distribution
  (stored Q; q at depth i ignores the drafts before it, still a valid proposal).
* Hydra and EAGLE-3 (kind ``"ar"``, the ``ar_draft`` schedule): k small passes, each
  conditioned on the drafts before it.

Where they read the target: a :class:`~spec_lib.drafters.feature_target.FeatureTarget` keeps
the hidden states of the verified rows whose K/V are cached, rows 0..n-2 for a prefix of n
tokens.  Row n-2 is where the target produced the last prefix token x_{n-1}: it is Medusa's
h_t with x_{t+1} = x_{n-1}, so head i proposes x_{n-1+i}.  Before the first verify call there
are no features yet; the first round then drafts from a zero feature, so its drafts are
mostly rejected, and exactness is unaffected.
"""

from __future__ import annotations

import time

import torch

from ..models import PerThreadState
from .base import DraftLogits, DraftOutput, SampleRule
from .feature_heads import Eagle3Network, FeatureHeads
from .feature_target import FeatureTarget


class _State:
    """One thread's drafter state: EAGLE's K/V over the verified rows and the rows covered."""

    def __init__(self) -> None:
        self.kv: tuple[torch.Tensor, torch.Tensor] | None = None
        self.rows = 0
        self.last: torch.Tensor | None = None          # EAGLE: output a at the last verified row


def _check_target(target) -> None:
    if not isinstance(target, FeatureTarget):
        raise TypeError(f"target must be a spec_lib.drafters.FeatureTarget, got {type(target).__name__}")


class _FeatureDrafter(PerThreadState):
    """What the three share: the target, its frozen embeddings and LM head, the checks."""

    def __init__(self, target: FeatureTarget, network) -> None:
        _check_target(target)
        if network.config.vocab_size != target.vocab_size or network.config.hidden_size != target.config.hidden_size:
            raise ValueError("network and target must share vocabulary and hidden size, got "
                             f"{network.config.vocab_size}/{network.config.hidden_size} and "
                             f"{target.vocab_size}/{target.config.hidden_size}")
        self.target = target
        self.network = network.eval()
        self.vocab_size = target.vocab_size
        self.max_positions = getattr(target.config, "max_position_embeddings", None)

    @property
    def device(self) -> torch.device:
        return next(self.network.parameters()).device

    def _new_state(self) -> _State:
        if self.network.training:
            self.network.eval()
        return _State()

    def positions_needed(self, prefix_len: int, k: int) -> int:
        return prefix_len + k

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.target.lm.get_output_embeddings()(hidden)
        return logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits

    def _embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.target.lm.get_input_embeddings()(tokens)

    def _new_features(self, state: _State, prefix: torch.Tensor) -> torch.Tensor:
        """The target's features of the verified rows the drafter has not read yet."""
        new = self.target.features_from(state.rows)
        if state.rows + new.shape[0] not in (0, prefix.numel() - 1):
            raise RuntimeError(f"the target holds features of {state.rows + new.shape[0]} rows but the prefix has "
                               f"{prefix.numel()} tokens: decode on the FeatureTarget the drafter was built with")
        return new.to(self.network.dtype)


class FeatureHeadDrafter(_FeatureDrafter):
    """Medusa (kind ``"diffusion"``, the ``drafted`` schedule) or Hydra (kind ``"ar"``, the
    ``ar_draft`` schedule) on a :class:`FeatureTarget` whose ``layer_ids`` include the heads'
    ``feature_layer``.  A round proposes k <= ``num_heads`` tokens."""

    def __init__(self, target: FeatureTarget, network: FeatureHeads) -> None:
        _check_target(target)
        if not isinstance(network, FeatureHeads):
            raise TypeError(f"network must be a FeatureHeads (Medusa or Hydra), got {type(network).__name__}")
        if network.config.feature_layer not in target.layer_ids:
            raise ValueError(f"the heads read target layer {network.config.feature_layer}, which the target does not "
                             f"record (its layer_ids are {target.layer_ids})")
        super().__init__(target, network)
        self.kind = "diffusion" if network.config.kind == "medusa" else "ar"
        size = int(target.config.hidden_size)
        start = target.layer_ids.index(network.config.feature_layer) * size
        self._slice = slice(start, start + size)

    def _h(self, state: _State, prefix: torch.Tensor) -> torch.Tensor:
        """h_t: the feature of row n-2 (zeros before the first verify call)."""
        new = self._new_features(state, prefix)
        state.rows += new.shape[0]
        if state.rows == 0:
            return torch.zeros(self.network.config.hidden_size, dtype=self.network.dtype, device=prefix.device)
        last = new[-1] if new.shape[0] else self.target.features_from(state.rows - 1)[-1].to(self.network.dtype)
        return last[self._slice]

    def _check_k(self, k: int) -> None:
        if not 1 <= k <= self.network.config.num_heads:
            raise ValueError(f"width (k) must be in [1, {self.network.config.num_heads}] for these "
                             f"{self.network.config.num_heads} heads, got {k!r}")

    def draft_logits(self, prefix: torch.Tensor, k: int) -> DraftLogits:
        """Medusa's round: the logits ``(k, V)`` of heads 1..k, from one pass."""
        if self.kind != "diffusion":
            raise TypeError("draft_logits is Medusa's one-pass round; Hydra drafts head by head (draft)")
        self._check_k(k)
        with torch.inference_mode():
            start = time.perf_counter()
            h = self._h(self.state, prefix)
            logits = self._logits(torch.stack([self.network.head(i, h) for i in range(k)]))
            if logits.is_cuda:
                torch.cuda.synchronize(logits.device)
        return DraftLogits(logits, [time.perf_counter() - start], [k])

    def draft(self, prefix: torch.Tensor, k: int, sample: SampleRule) -> DraftOutput:
        """k tokens and their stored Q: Medusa samples each head's distribution (independent
        heads: q at depth i ignores the drafts before it, still a valid proposal); Hydra head by
        head, each reading the drafts before it."""
        if self.kind == "diffusion":
            round_ = self.draft_logits(prefix, k)
            tokens, q = sample(round_.logits)
            return DraftOutput(tokens, q, round_.seconds, round_.rows)
        self._check_k(k)
        tokens, qs, seconds = [], [], []
        with torch.inference_mode():
            start = time.perf_counter()
            h = self._h(self.state, prefix)
            embeds = self._embed(prefix[-1:])                                  # E(x_{t+1}) = E(x_{n-1})
            for i in range(k):
                token, q = sample(self._logits(self.network.head(i, h, embeds))[None])
                tokens.append(token)
                qs.append(q)
                embeds = torch.cat([embeds, self._embed(token)])
                now = time.perf_counter()
                seconds.append(now - start)
                start = now
        return DraftOutput(torch.cat(tokens), None if qs[0] is None else torch.cat(qs), seconds, [1] * k)


class Eagle3Drafter(_FeatureDrafter):
    """EAGLE-3 (kind ``"ar"``, the ``ar_draft`` schedule) on a :class:`FeatureTarget` whose
    ``layer_ids`` include the network's ``target_layer_ids``.

    Each round first runs the layer over the newly verified rows (their real features, K/V
    kept), whose last output gives q of d_1; then one pass per further draft, row n-1+i fed
    E(d_i) and the output of the row before, attending to the kept rows and this round's
    draft rows (discarded after the round)."""

    kind = "ar"

    def __init__(self, target: FeatureTarget, network: Eagle3Network) -> None:
        _check_target(target)
        if not isinstance(network, Eagle3Network):
            raise TypeError(f"network must be an Eagle3Network, got {type(network).__name__}")
        missing = [i for i in network.config.target_layer_ids if i not in target.layer_ids]
        if missing:
            raise ValueError(f"network.config.target_layer_ids {network.config.target_layer_ids} must all be among "
                             f"the target's layer_ids {target.layer_ids} (missing {missing})")
        super().__init__(target, network)
        size = int(target.config.hidden_size)
        self._columns = torch.cat([torch.arange(size) + target.layer_ids.index(i) * size
                                   for i in network.config.target_layer_ids])

    def draft(self, prefix: torch.Tensor, k: int, sample: SampleRule) -> DraftOutput:
        """k tokens, each drawn with ``sample`` from q given the prefix and the drafts before it."""
        state, net = self.state, self.network
        n = prefix.numel()
        tokens, qs, seconds, rows = [], [], [], []
        with torch.inference_mode():
            start = time.perf_counter()
            new = self._new_features(state, prefix)[:, self._columns.to(prefix.device)]
            if new.shape[0]:                                  # real rows j feed E(x_{j+1}), x_{j+1} verified
                first = state.rows
                positions = torch.arange(first, first + new.shape[0], device=prefix.device)[None]
                mask = torch.ones(new.shape[0], first + new.shape[0], dtype=torch.bool, device=prefix.device)
                mask[:, first:] = torch.ones(new.shape[0], new.shape[0], dtype=torch.bool,
                                             device=prefix.device).tril()
                a, _, kv = net.step(self._embed(prefix[first + 1: n])[None], net.fuse(new)[None], positions,
                                    state.kv, mask[None, None])
                state.kv = kv if state.kv is None else (torch.cat([state.kv[0], kv[0]], 2),
                                                        torch.cat([state.kv[1], kv[1]], 2))
                state.rows += new.shape[0]
                state.last = a[0, -1]
                normed = net.norm(a[0, -1])
                rows.append(int(new.shape[0]))
            else:                                              # before the first verify call: no features
                zeros = torch.zeros(1, 1, net.config.hidden_size, dtype=net.dtype, device=prefix.device)
                a, normed, _ = net.step(self._embed(prefix[-1:])[None], zeros,
                                        torch.tensor([[n - 2 if n > 1 else 0]], device=prefix.device))
                state.last, normed = a[0, -1], normed[0, -1]
                rows.append(1)
            past, feat = state.kv, state.last
            for i in range(k):
                token, q = sample(self._logits(normed)[None])
                tokens.append(token)
                qs.append(q)
                now = time.perf_counter()
                seconds.append(now - start)
                start = now
                if i == k - 1:
                    break
                position = torch.tensor([[n - 1 + i]], device=prefix.device)
                a, normed, kv = net.step(self._embed(token)[None], feat[None, None], position, past)
                past = kv if past is None else (torch.cat([past[0], kv[0]], 2), torch.cat([past[1], kv[1]], 2))
                feat, normed = a[0, -1], normed[0, -1]
                rows.append(1)
        return DraftOutput(torch.cat(tokens), None if qs[0] is None else torch.cat(qs), seconds, rows[:k])
