"""DFlash and DEdit drafting: one block pass from masks (P1), then K - 1 editing passes.

References:
  * seed 002 (DEdit), Sec. 3: "P1" drafts the block ``[anchor, MASK x (W - 1)]`` in one pass
    of the feature-conditioned drafter; each further pass reads the previous proposal with
    the anchor fixed and re-predicts every slot, "without confidence gating"; only the final
    proposal P_K is verified (K = 3 is DEdit's default, "P3").  K = 1 is DFlash.
  * seed 002, Sec. 4 "stochastic" decoding (as the public DFlash decoder does it): the
    drafter proposes its argmax and a draft token is accepted while it equals the token the
    target samples.  That is rejection sampling with a point-mass stored Q (accept with
    probability p(d); on rejection draw from p with d removed), so it stays exact; the
    ``stochastic="sample"`` option instead draws the final proposal from the tempered drafter.
  * An early-exit option seed 002 leaves as future work: stop editing once a pass changes no
    token (``early_exit=True``; the passes actually run are reported per round).

The drafter keeps, per thread, only the context K/V of the verified prefix (extended each
round by the target's newly verified features, :class:`~spec_lib.drafters.feature_target.FeatureTarget`);
the block rows are never cached.  The first round has no target features yet (the first
verify call processes the prompt), so it drafts from the anchor alone.
"""

from __future__ import annotations

import time

import torch

from .. import verify
from ..models import PerThreadState
from .base import DraftLogits, DraftOutput, SampleRule
from .feature_block import FeatureBlockDrafter
from .feature_target import FeatureTarget

STOCHASTIC = ("argmax", "sample")


class _State:
    """One thread's drafter cache: context K/V per layer and the rows they cover."""

    def __init__(self) -> None:
        self.kv: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self.rows = 0
        self.passes: list[int] = []          # passes run per round (early exit)


class BlockEditDrafter(PerThreadState):
    """A :class:`~spec_lib.drafters.base.Drafter` (kind ``"diffusion"``: one proposal per
    round, every q conditioned on the verified prefix) for the ``deer`` schedule.

    Args:
        target: the :class:`FeatureTarget` the decode runs on (its features condition the drafts).
        network: a trained :class:`FeatureBlockDrafter` whose ``target_layer_ids`` are the target's.
        passes: K >= 1; 1 is DFlash's single pass, K > 1 edits K - 1 times (DEdit "P_K").
        early_exit: stop editing once a pass changes no token.
        stochastic: at temperature > 0, ``"argmax"`` (seed 002: point-mass Q) or ``"sample"``.
    """

    kind = "diffusion"

    def __init__(self, target: FeatureTarget, network: FeatureBlockDrafter, *, passes: int = 1,
                 early_exit: bool = False, stochastic: str = "argmax") -> None:
        if not isinstance(target, FeatureTarget):
            raise TypeError(f"target must be a spec_lib.drafters.feature_target.FeatureTarget, got {type(target).__name__}")
        if not isinstance(network, FeatureBlockDrafter):
            raise TypeError(f"network must be a FeatureBlockDrafter, got {type(network).__name__}")
        if list(network.config.target_layer_ids) != target.layer_ids:
            raise ValueError(f"network.config.target_layer_ids {network.config.target_layer_ids} must equal the "
                             f"target's layer_ids {target.layer_ids}")
        if network.config.vocab_size != target.vocab_size or network.config.hidden_size != target.config.hidden_size:
            raise ValueError("network and target must share vocabulary and hidden size, got "
                             f"{network.config.vocab_size}/{network.config.hidden_size} and "
                             f"{target.vocab_size}/{target.config.hidden_size}")
        if isinstance(passes, bool) or not isinstance(passes, int) or not 1 <= passes <= 64:
            raise ValueError(f"passes must be an int in [1, 64], got {passes!r}")
        if stochastic not in STOCHASTIC:
            raise ValueError(f"stochastic must be one of {list(STOCHASTIC)}, got {stochastic!r}")
        self.target = target
        self.network = network.eval()
        self.passes = passes
        self.early_exit = bool(early_exit)
        self.stochastic = stochastic
        self.vocab_size = target.vocab_size
        self.max_positions = network.config.max_position_embeddings
        self.mask_token_id = int(network.config.mask_token_id)

    @property
    def device(self) -> torch.device:
        return next(self.network.parameters()).device

    def _new_state(self) -> _State:
        if self.network.training:
            self.network.eval()
        return _State()

    def positions_needed(self, prefix_len: int, k: int) -> int:
        """Block positions run from the anchor (prefix_len - 1) to prefix_len - 1 + k."""
        return prefix_len + k

    @property
    def passes_per_round(self) -> list[int]:
        """Editing passes run in each round of this thread's current decode."""
        return list(self.state.passes)

    def _extend_context(self, state: _State, anchor_position: int) -> None:
        """Project the target's newly verified features into every layer's context K/V."""
        new = self.target.features_from(state.rows)
        if new.shape[0]:
            positions = torch.arange(state.rows, state.rows + new.shape[0], device=new.device)[None]
            kv = self.network.context_kv(new[None].to(self.network.dtype), positions)
            state.kv = kv if state.kv is None else [(torch.cat([k0, k1], 2), torch.cat([v0, v1], 2))
                                                    for (k0, v0), (k1, v1) in zip(state.kv, kv, strict=True)]
            state.rows += new.shape[0]
        allowed = (0, anchor_position) if not state.passes else (anchor_position,)   # round 1: no features yet
        if state.rows not in allowed:
            raise RuntimeError(f"the drafter's context covers {state.rows} rows but the anchor is at position "
                               f"{anchor_position}: decode on the same FeatureTarget the drafter was built with")
        if state.kv is None:                                     # first round: no features yet
            empty = self.network.context_kv(new[None].to(self.network.dtype),
                                            torch.zeros(1, 0, dtype=torch.long, device=new.device))
            state.kv = empty

    def _pass(self, block: torch.Tensor, positions: torch.Tensor, mask, kv):
        """One block pass: logits of slots 1..k and their argmax (the next proposal)."""
        embed, head = self.target.lm.get_input_embeddings(), self.target.lm.get_output_embeddings()
        logits = head(self.network(embed(block)[None], positions, kv, mask)[0, 1:])
        if logits.dtype in (torch.float16, torch.bfloat16):
            logits = logits.float()
        return logits, logits.argmax(-1)

    def _round_pass(self, state: _State, positions: torch.Tensor, k: int):
        """The pass the K passes of this round run, as ``block -> (logits, proposal)``: here
        the eager pass over the context K/V (the static twin reads its buffers instead)."""
        return lambda block: self._pass(block, positions, None, state.kv)

    def draft_logits(self, prefix: torch.Tensor, k: int) -> DraftLogits:
        """The round's scores: ``logits`` (k, V) of the last pass run, seconds and rows per
        pass (seed 002 Sec. 3: P1 from masks, then K - 1 passes each reading the previous
        proposal, the anchor fixed; early exit stops once a pass changes no token)."""
        state = self.state
        anchor_position = prefix.numel() - 1
        seconds, rows = [], []
        with torch.inference_mode():
            start = time.perf_counter()
            before = state.rows
            self._extend_context(state, anchor_position)
            block = torch.full((k + 1,), self.mask_token_id, dtype=torch.long, device=prefix.device)
            block[0] = prefix[-1]
            positions = torch.arange(anchor_position, anchor_position + k + 1, device=prefix.device)[None]
            run_pass = self._round_pass(state, positions, k)
            for step in range(self.passes):
                logits, proposal = run_pass(block)
                changed = True
                if self.early_exit and step:
                    changed = bool((proposal != block[1:]).any())            # one host sync per pass
                block[1:] = proposal
                if logits.is_cuda:
                    torch.cuda.synchronize(logits.device)
                now = time.perf_counter()
                seconds.append(now - start)
                rows.append(k + 1 + (state.rows - before if step == 0 else 0))
                start = now
                if not changed:
                    break
        state.passes.append(len(seconds))
        return DraftLogits(logits, seconds, rows)

    def draft(self, prefix: torch.Tensor, k: int, sample: SampleRule) -> DraftOutput:
        """The final proposal P_K and its stored Q (None when greedy)."""
        round_ = self.draft_logits(prefix, k)
        logits = round_.logits
        tokens, q = sample(logits)
        if q is not None and self.stochastic == "argmax":                  # seed 002's stochastic rule
            tokens = logits.argmax(-1)
            q = verify.SparseQ(tokens[:, None], torch.ones(k, 1, dtype=logits.dtype, device=logits.device),
                               self.vocab_size)
        return DraftOutput(tokens, q, round_.seconds, round_.rows)
