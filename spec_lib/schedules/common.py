"""State shared by every LTR schedule: the verified prefix, stopping, drafting and accounting.

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

import math
import numbers
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from .. import verify
from ..models import CallOutput, SpecModel  # noqa: F401  (SpecModel: the documented protocol)

#: Schedules that need only the model (self-speculative, seed 000).
SCHEDULES = ("ar", "linear", "quadratic", "packed")
#: Schedules that draft with a separate model, and the drafter kind each one needs (seed 001).
DRAFTER_SCHEDULES = {"deer": "diffusion", "ar_draft": "ar"}
ALL_SCHEDULES = SCHEDULES + tuple(DRAFTER_SCHEDULES)
SPEC_MODEL_API = ("vocab_size", "max_positions", "device", "reset", "call", "commit")

#: Deliberately wrong variants of rejection sampling, for negative controls only.
ABLATIONS = (None, "fresh_q", "no_residual", "resample_without_q")


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


def _is_int(value) -> bool:
    return isinstance(value, (numbers.Integral, np.integer)) and not isinstance(value, bool)


def as_prompt_tensor(prompt_ids, vocab_size: int, device: torch.device) -> torch.Tensor:
    """Validate ``prompt_ids`` (a non-empty 1-D sequence of token ids) and return a LongTensor."""
    if isinstance(prompt_ids, torch.Tensor):
        if prompt_ids.dtype.is_floating_point or prompt_ids.dtype.is_complex or prompt_ids.dtype == torch.bool:
            raise ValueError(f"prompt_ids must contain integer token ids, got dtype {prompt_ids.dtype}")
        ids = prompt_ids.detach().to("cpu", torch.long)
    else:
        if isinstance(prompt_ids, (str, bytes)):
            raise ValueError("prompt_ids must be a sequence of integer token ids, got a string "
                             "(tokenize it first)")
        try:
            items = list(prompt_ids)
        except TypeError:
            raise ValueError(f"prompt_ids must be a sequence of integer token ids, "
                             f"got {type(prompt_ids).__name__}") from None
        if not all(_is_int(t) for t in items):
            bad = next(t for t in items if not _is_int(t))
            raise ValueError(f"prompt_ids must contain integer token ids, got {bad!r}")
        ids = torch.tensor([int(t) for t in items], dtype=torch.long)
    if ids.ndim == 2 and ids.shape[0] == 1:
        ids = ids[0]
    if ids.ndim != 1:
        raise ValueError(f"prompt_ids must be 1-D (batch size 1), got shape {tuple(ids.shape)}")
    if ids.numel() == 0:
        raise ValueError("prompt_ids must not be empty (at least one token)")
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= vocab_size:
        raise ValueError(f"prompt_ids must be token ids in [0, {vocab_size}), got values in [{low}, {high}]")
    return ids.to(device)


def validate_drafter(model, schedule: str, drafter) -> None:
    """A separate drafter is given exactly when the schedule needs one, of the right kind."""
    needed = DRAFTER_SCHEDULES.get(schedule)
    if needed is None:
        if drafter is not None:
            raise ValueError(f"drafter is only used by schedules {list(DRAFTER_SCHEDULES)}; "
                             f"schedule {schedule!r} drafts with the model itself (pass drafter=None)")
        return
    if drafter is None:
        raise ValueError(f"schedule {schedule!r} needs drafter= a {needed} drafter "
                         f"(spec_lib.drafters.{'DiffusionDrafter' if needed == 'diffusion' else 'ARDrafter'})")
    kind = getattr(drafter, "kind", None)
    if kind != needed:
        raise ValueError(f"schedule {schedule!r} needs a {needed} drafter, got {type(drafter).__name__} "
                         f"(kind {kind!r})")
    if drafter.vocab_size != model.vocab_size:
        raise ValueError(f"drafter vocab_size {drafter.vocab_size} differs from the target's "
                         f"{model.vocab_size}: drafter and target must share one tokenizer")


def validate(model, prompt_ids, *, schedule, width, max_new_tokens, temperature, eos_token_id,
             seed, draft_top_k, draft_top_p, drafter=None) -> torch.Tensor:
    """Check every argument of :func:`spec_lib.decode` before any model call."""
    if not all(hasattr(model, name) for name in SPEC_MODEL_API):      # (a Protocol check is slow)
        hint = (" (wrap a transformers model: spec_lib.models.DualModeLM(hf_model, mask_token_id))"
                if hasattr(model, "config") else "")
        raise TypeError(f"model must implement spec_lib.models.SpecModel, got {type(model).__name__}{hint}")
    if schedule not in ALL_SCHEDULES:
        raise ValueError(f"schedule must be one of {list(ALL_SCHEDULES)}, got {schedule!r}")
    if not _is_int(width) or width < 1:
        raise ValueError(f"width must be an int >= 1 (the speculative width W), got {width!r}")
    if not _is_int(max_new_tokens) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real) \
            or not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {temperature!r}")
    vocab = model.vocab_size
    if eos_token_id is not None and (not _is_int(eos_token_id) or not 0 <= eos_token_id < vocab):
        raise ValueError(f"eos_token_id must be None or an int in [0, {vocab}), got {eos_token_id!r}")
    if seed is not None and not _is_int(seed):
        raise ValueError(f"seed must be None or an int, got {seed!r}")
    if draft_top_k is not None and (not _is_int(draft_top_k) or draft_top_k < 1):
        raise ValueError(f"draft_top_k must be None or an int >= 1, got {draft_top_k!r}")
    if draft_top_p is not None and (isinstance(draft_top_p, bool) or not isinstance(draft_top_p, numbers.Real)
                                    or not 0 < draft_top_p <= 1):
        raise ValueError(f"draft_top_p must be None or a number in (0, 1], got {draft_top_p!r}")
    validate_drafter(model, schedule, drafter)
    if schedule == "ar_draft" and (draft_top_k is not None or draft_top_p is not None):
        raise ValueError("draft_top_k / draft_top_p are not supported with schedule 'ar_draft' "
                         "(its Q is stored densely, one row per drafter pass)")
    prompt = as_prompt_tensor(prompt_ids, vocab, model.device)
    limit = model.max_positions
    if limit is not None:
        if prompt.numel() > limit:
            raise ValueError(f"prompt_ids has {prompt.numel()} tokens, longer than the model's position "
                             f"limit max_position_embeddings={limit}")
        if prompt.numel() + max_new_tokens > limit:
            raise ValueError(f"max_new_tokens={max_new_tokens} with a {prompt.numel()}-token prompt exceeds "
                             f"the model's position limit {limit}; allowed: max_new_tokens <= "
                             f"{limit - prompt.numel()}")
    order = getattr(model, "order", 1)
    if prompt.numel() < order:
        raise ValueError(f"prompt_ids must have at least order={order} tokens for this model")
    return prompt


class Decoding:
    """Mutable state of one decode: prefix buffer, generator, stop flags and statistics."""

    def __init__(self, model: SpecModel, prompt: torch.Tensor, *, width: int, max_new_tokens: int,
                 temperature: float, eos_token_id: int | None, seed: int | None,
                 draft_top_k: int | None = None, draft_top_p: float | None = None,
                 ablation: str | None = None, drafter=None) -> None:
        if ablation not in ABLATIONS:
            raise ValueError(f"ablation must be one of {list(ABLATIONS)}, got {ablation!r}")
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

    def count_drafter(self, seconds: list[float], rows: list[int]) -> None:
        """Account for separate-drafter passes (seed 001): their own NFE, inside model time."""
        self.drafter_nfe += len(seconds)
        self.drafter_seconds += sum(seconds)
        self.model_seconds += sum(seconds)
        self.drafter_rows_per_call += rows

    # ----- drafting (Eq. 3 / Algorithm 2 line 12) -----------------------------------------------
    def propose(self, draft_logits: torch.Tensor):
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
                          fresh_q=None) -> tuple[int, int]:
        """Verify ``draft`` with the call's target logits, stop, append C_t^(1..a), commit.

        Returns ``(h, a)``: matched draft tokens and tokens appended (A_t after stopping).
        """
        m = draft.numel()
        if m == 0:                                                      # nothing to verify: h = 0
            return self._append_one(out.target_logits[0])
        if self.temperature == 0:
            h, emitted = verify.greedy_verify(draft, out.target_logits)
        else:
            p_target = verify.probabilities(out.target_logits, self.temperature)
            q = fresh_q if (self.ablation == "fresh_q" and fresh_q is not None) else q_stored
            h, emitted = verify.rejection_verify(draft, q, p_target, self.generator,
                                                 residual=self.ablation != "no_residual")
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
