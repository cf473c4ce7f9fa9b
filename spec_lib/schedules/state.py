"""State of one decode, shared by every schedule: the verified prefix, stopping, drafting
and accounting.

References (seed 000):
  * Algorithm 1 lines 5-9 / Algorithm 2 lines 5-11: verify, add the verifier token,
    apply the ending condition a = min({A_t, L + |P| - |P_{t-1}|} ∪ {i : C_t^(i) = EOS}),
    append C_t^(1..a).
  * Algorithm 2 line 12: each retained draft token is sampled from, and stored with,
    its drafter distribution Q.
  * App. E.5: every forward pass is one NFE, prompt processing included.

The hot path reads the device once per iteration (:meth:`Decoding.verify_and_append`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from .. import verify
from ..models import CallOutput, SpecModel
from . import ablations


@dataclass
class DecodeResult:
    """The outcome of one :func:`spec_lib.decode` call.

    Attributes:
        tokens: the continuation after the prompt, stop-truncated (EOS included).
        nfe: model forward calls; processing the prompt counts (App. E.5).
        accepted: tokens appended per iteration (A_t after stopping).
        rows_per_call: input rows evaluated in each call.
        model_seconds: time inside model forward passes.
        wall_seconds: the whole decode; non-model decoder time = wall - model.
        extras: additional diagnostics, e.g. ``call_seconds`` (model time of each call).
    """

    tokens: list[int]
    nfe: int
    accepted: list[int]
    rows_per_call: list[int]
    model_seconds: float
    wall_seconds: float
    extras: dict = field(default_factory=dict, repr=False)


class Decoding:
    """Mutable state of one decode: prefix buffer, generator, stop flags and statistics."""

    def __init__(self, model: SpecModel, prompt: torch.Tensor, *, width: int, max_new_tokens: int,
                 temperature: float, eos_token_id: int | None, seed: int | None,
                 draft_top_k: int | None = None, draft_top_p: float | None = None,
                 ablation: str | None = None, drafter=None) -> None:
        if ablation not in ablations.ABLATIONS:
            raise ValueError(f"ablation must be one of {list(ablations.ABLATIONS)}, got {ablation!r}")
        self.model = model
        self.width = width
        self.limit = max_new_tokens
        self.temperature = float(temperature)
        self.eos = eos_token_id
        self.top_k, self.top_p = draft_top_k, draft_top_p
        self.ablation = ablation
        self.device = prompt.device
        self.prompt_len = prompt.numel()
        # Room for the prompt, L tokens and one full over-long acceptance.
        self.buffer = torch.empty(self.prompt_len + max_new_tokens + width + 2, dtype=torch.long,
                                  device=self.device)
        self.buffer[: self.prompt_len] = prompt
        self.no_draft = self.buffer.new_empty(0)
        self.length = self.prompt_len
        self.generator = None
        if self.temperature > 0:
            self.generator = torch.Generator(device=self.device)
            self.generator.manual_seed(0 if seed is None else int(seed))
        self.nfe = 0
        self.rows_per_call: list[int] = []
        self.accepted: list[int] = []
        self.model_seconds = 0.0
        self.call_seconds: list[float] = []
        self.stopped = max_new_tokens == 0
        self._steps = torch.arange(width + 2, device=self.device)      # 0..W+1, for EOS search
        self.drafter = drafter
        self.drafter_nfe = 0
        self.drafter_seconds = 0.0
        self.drafter_rows_per_call: list[int] = []
        model.reset()
        if drafter is not None:
            drafter.reset()

    # ----- model calls ---------------------------------------------------------------------
    @property
    def prefix(self) -> torch.Tensor:
        return self.buffer[: self.length]

    @property
    def generated(self) -> int:
        return self.length - self.prompt_len

    def call(self, kind: str, draft: torch.Tensor | None = None) -> CallOutput:
        """One counted forward call (one NFE)."""
        if draft is None:
            draft = self.no_draft
        out = self.model.call(kind, self.prefix, draft, self.width)
        self.nfe += 1
        self.rows_per_call.append(out.rows)
        self.model_seconds += out.seconds
        self.call_seconds.append(out.seconds)
        return out

    def draft_with(self, drafter):
        """A separate drafter's draft of W tokens after the prefix (seed 001), its passes
        counted as drafter NFE and inside model time; returns ``(draft, stored Q)``."""
        out = drafter.draft(self.prefix, self.width, self.sample_draft)
        self.drafter_nfe += len(out.seconds)
        self.drafter_seconds += sum(out.seconds)
        self.model_seconds += sum(out.seconds)
        self.drafter_rows_per_call += out.rows
        return out.tokens, out.q

    # ----- drafting (Eq. 3 / Algorithm 2 line 12) -----------------------------------------------
    def sample_draft(self, draft_logits: torch.Tensor):
        """Draft tokens and their stored distributions from drafter logits ``(n, V)``.

        Greedy: argmax, no Q needed (Q is a point mass).  Sampling: Q = tempered softmax,
        optionally truncated to top-k / top-p (stored sparsely), and d ~ Q.
        """
        if self.temperature == 0:
            return draft_logits.max(-1).indices, None
        q = verify.probabilities(draft_logits, self.temperature)
        if self.top_k is not None or self.top_p is not None:
            q = verify.truncate(q, self.top_k, self.top_p)
            return q.sample(self.generator), q
        return verify.sample(q, self.generator), q

    # ----- verification, stopping and append (Algorithm 1 lines 5-9, Algorithm 2 lines 5-11) ---
    def verify_and_append(self, out: CallOutput, draft: torch.Tensor, q_stored,
                          q_verify=None) -> tuple[int, int]:
        """Verify ``draft`` with the call's target logits, stop, append C_t^(1..a), commit.

        ``q_verify`` replaces ``q_stored`` in the acceptance test (negative controls only,
        :mod:`spec_lib.schedules.ablations`).  Returns ``(h, a)``: matched draft tokens and
        tokens appended (A_t after stopping).
        """
        m = draft.numel()
        if m == 0:                                                      # nothing to verify: h = 0
            return self._append_one(out.target_logits[0])
        if self.temperature == 0:
            h, emitted = verify.greedy_verify(draft, out.target_logits)
        else:
            p_target = verify.probabilities(out.target_logits, self.temperature)
            h, emitted = verify.rejection_verify(draft, q_stored if q_verify is None else q_verify, p_target,
                                                 self.generator, residual=ablations.uses_residual(self.ablation))
        if self.eos is None:
            h, first_eos = int(h), m + 1                                # the one host sync
        else:
            # First EOS among the accepted tokens C_t = emitted[:h + 1] (m + 1 if none).
            is_eos = (emitted == self.eos) & (self._steps[: m + 1] <= h)
            first_eos = torch.where(is_eos.any(), is_eos.long().argmax(), self._steps[m + 1])
            h, first_eos = torch.stack([h, first_eos]).tolist()         # the one host sync
        a = min(h + 1, self.limit - self.generated, first_eos + 1)      # ending condition
        self.buffer[self.length: self.length + a] = emitted[:a]
        self.length += a
        self.accepted.append(a)
        self.model.commit(a)
        if first_eos < a or self.generated >= self.limit:
            self.stopped = True
        return h, a

    def _append_one(self, logits: torch.Tensor) -> tuple[int, int]:
        """Nothing to verify (AR, and any call with D empty): h = 0 and the bonus token is
        the argmax (greedy) or a draw from p_target (Algorithm 2 line 7, h = |D| = 0)."""
        if self.temperature == 0:
            token = int(logits.max(-1).indices)                          # the one host sync
        else:
            token = int(verify.sample(verify.probabilities(logits, self.temperature), self.generator))
        self.buffer[self.length] = token
        self.length += 1
        self.accepted.append(1)
        self.model.commit(1)
        if token == self.eos or self.generated >= self.limit:
            self.stopped = True
        return 0, 1

    def result(self, started: float, **extras) -> DecodeResult:
        tokens = self.buffer[self.prompt_len: self.length].tolist()
        return DecodeResult(tokens=tokens, nfe=self.nfe, accepted=self.accepted,
                            rows_per_call=self.rows_per_call, model_seconds=self.model_seconds,
                            wall_seconds=time.perf_counter() - started,
                            extras={"call_seconds": self.call_seconds, **self._drafter_extras(), **extras})

    def _drafter_extras(self) -> dict:
        if self.drafter is None:
            return {}
        return {"drafter_nfe": self.drafter_nfe, "drafter_seconds": self.drafter_seconds,
                "drafter_rows_per_call": self.drafter_rows_per_call}
