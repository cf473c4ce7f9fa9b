"""Argument checks shared by :func:`spec_lib.decode` and :func:`spec_lib.batch.decode_batch`.

Every bad argument raises a ``ValueError`` (``TypeError`` for a model of the wrong kind)
naming the argument and the allowed values, before any model call.  Position limits are
checked against what the schedule's calls actually touch: drafts sit up to W (Quadratic-SS:
2W + 1) positions past the verified prefix (:meth:`spec_lib.masks.CallKind.reach`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping

import numpy as np
import torch

from ..masks import call_kind
from ..models import SpecModel, protocol_members

#: largest speculative width / drafter block size accepted.
MAX_WIDTH = 1024
#: largest number of rows one call may evaluate (the additive mask is rows x (cache + rows)).
MAX_ROWS_PER_CALL = 8192
#: largest output length for a model without a position limit (e.g. the exact toy models).
MAX_NEW_TOKENS = 1_000_000
SEED_LIMIT = 2 ** 64

SPEC_MODEL_API = protocol_members(SpecModel)


def is_int(value) -> bool:
    """An integer (Python or numpy), not a bool."""
    return isinstance(value, (numbers.Integral, np.integer)) and not isinstance(value, (bool, np.bool_))


def as_prompt_tensor(prompt_ids, vocab_size: int, device: torch.device, name: str = "prompt_ids") -> torch.Tensor:
    """A non-empty 1-D sequence of token ids (list, tuple, numpy array or tensor, optionally
    of shape (1, n)) as a LongTensor on ``device``."""
    if isinstance(prompt_ids, (str, bytes)):
        raise ValueError(f"{name} must be a sequence of integer token ids, got a string (tokenize it first)")
    if isinstance(prompt_ids, Mapping) or isinstance(prompt_ids, (set, frozenset)):
        raise ValueError(f"{name} must be an ordered sequence of integer token ids, got {type(prompt_ids).__name__}")
    if isinstance(prompt_ids, torch.Tensor):
        if prompt_ids.dtype.is_floating_point or prompt_ids.dtype.is_complex or prompt_ids.dtype == torch.bool:
            raise ValueError(f"{name} must contain integer token ids, got dtype {prompt_ids.dtype}")
        ids = prompt_ids.detach().to("cpu", torch.long)
    elif isinstance(prompt_ids, np.ndarray) and np.issubdtype(prompt_ids.dtype, np.integer):
        ids = torch.from_numpy(prompt_ids.astype(np.int64))
    else:
        try:                         # nested lists of shape (1, n) are accepted like (1, n) tensors
            array = np.asarray(prompt_ids, dtype=object)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be a sequence of integer token ids, got {type(prompt_ids).__name__}") from None
        if array.ndim == 0:
            raise ValueError(f"{name} must be a sequence of integer token ids, got {type(prompt_ids).__name__}")
        bad = next((t for t in array.reshape(-1) if not is_int(t)), None)
        if bad is not None:
            raise ValueError(f"{name} must contain integer token ids, got {bad!r}")
        ids = torch.tensor([int(t) for t in array.reshape(-1)], dtype=torch.long).reshape(array.shape)
    if ids.ndim == 2 and ids.shape[0] == 1:
        ids = ids[0]
    if ids.ndim != 1:
        raise ValueError(f"{name} must be 1-D (or of shape (1, n)), got shape {tuple(ids.shape)}")
    if ids.numel() == 0:
        raise ValueError(f"{name} must not be empty (at least one token)")
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= vocab_size:
        raise ValueError(f"{name} must be token ids in [0, {vocab_size}), got values in [{low}, {high}]")
    return ids.to(device)


def validate_drafter(model, schedule: str, drafter, needed: str | None) -> None:
    """A separate drafter is given exactly when the schedule needs one, of the right kind."""
    if needed is None:
        if drafter is not None:
            raise ValueError(f"drafter is only used by the drafter-based schedules; schedule {schedule!r} "
                             f"drafts with the model itself (pass drafter=None)")
        return
    if drafter is None:
        raise ValueError(f"schedule {schedule!r} needs drafter= a {needed} drafter "
                         f"(spec_lib.drafters.{'DiffusionDrafter' if needed == 'diffusion' else 'ARDrafter'})")
    kind = getattr(drafter, "kind", None)
    if kind != needed or not callable(getattr(drafter, "draft", None)):
        raise ValueError(f"schedule {schedule!r} needs a {needed} drafter, got {type(drafter).__name__} "
                         f"(kind {kind!r})")
    if drafter.vocab_size != model.vocab_size:
        raise ValueError(f"drafter vocab_size {drafter.vocab_size} differs from the target's "
                         f"{model.vocab_size}: drafter and target must share one tokenizer")


def _check_positions(owner: str, limit: int | None, needed: int, what: str) -> None:
    if limit is not None and needed > limit:
        raise ValueError(f"{what} needs position ids up to {needed - 1}, beyond {owner}'s limit of {limit} "
                         f"positions; shorten the prompt or max_new_tokens, or lower width")


def validate(model, prompts: list, *, schedule: str, schedules: dict, width, max_new_tokens, temperature,
             eos_token_id, seed, draft_top_k=None, draft_top_p=None, drafter=None,
             prompt_name: str = "prompt_ids") -> list[torch.Tensor]:
    """Check every argument of a decode before any model call; returns the prompt tensors.

    ``schedules`` maps the allowed schedule names to their
    :class:`spec_lib.schedules.Schedule` records (calls, drafter kind).
    """
    if not all(hasattr(model, name) for name in SPEC_MODEL_API):      # (a Protocol check is slow)
        hint = (" (wrap a transformers model: spec_lib.models.DualModeLM(hf_model, mask_token_id))"
                if hasattr(model, "config") else "")
        raise TypeError(f"model must implement spec_lib.models.SpecModel, got {type(model).__name__}{hint}")
    if not isinstance(schedule, str) or schedule not in schedules:
        raise ValueError(f"schedule must be one of {list(schedules)}, got {schedule!r}")
    spec = schedules[schedule]
    if not is_int(width) or not 1 <= width <= MAX_WIDTH:
        raise ValueError(f"width must be an int in [1, {MAX_WIDTH}] (the speculative width W), got {width!r}")
    width = int(width)
    for kind in spec.calls:
        rows = call_kind(kind).rows(0, width, width)
        if rows > MAX_ROWS_PER_CALL:
            raise ValueError(f"width={width} gives {rows} rows per {kind!r} call for schedule {schedule!r}, "
                             f"above the limit of {MAX_ROWS_PER_CALL}; allowed: a smaller width")
    limit = getattr(model, "max_positions", None)
    if not is_int(max_new_tokens) or max_new_tokens < 0 or (limit is None and max_new_tokens > MAX_NEW_TOKENS):
        bound = f" <= {MAX_NEW_TOKENS}" if limit is None else ""
        raise ValueError(f"max_new_tokens must be an int >= 0{bound}, got {max_new_tokens!r}")
    max_new_tokens = int(max_new_tokens)
    if isinstance(temperature, (bool, np.bool_)) or not isinstance(temperature, numbers.Real) \
            or not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {temperature!r}")
    vocab = model.vocab_size
    if eos_token_id is not None and (not is_int(eos_token_id) or not 0 <= eos_token_id < vocab):
        raise ValueError(f"eos_token_id must be None or an int in [0, {vocab}), got {eos_token_id!r}")
    if seed is not None and (not is_int(seed) or not 0 <= seed < SEED_LIMIT):
        raise ValueError(f"seed must be None or an int in [0, 2**64), got {seed!r}")
    if draft_top_k is not None and (not is_int(draft_top_k) or draft_top_k < 1):
        raise ValueError(f"draft_top_k must be None or an int >= 1, got {draft_top_k!r}")
    if draft_top_p is not None and (isinstance(draft_top_p, (bool, np.bool_)) or not isinstance(draft_top_p, numbers.Real)
                                    or not 0 < draft_top_p <= 1):
        raise ValueError(f"draft_top_p must be None or a number in (0, 1], got {draft_top_p!r}")
    validate_drafter(model, schedule, drafter, spec.drafter)
    if schedule == "ar_draft" and (draft_top_k is not None or draft_top_p is not None):
        raise ValueError("draft_top_k / draft_top_p are not supported with schedule 'ar_draft' "
                         "(its Q is stored densely, one row per drafter pass)")
    tensors = [as_prompt_tensor(p, vocab, model.device, prompt_name) for p in prompts]
    order = getattr(model, "order", 1)
    window = getattr(model, "attention_window", None)
    for prompt in tensors:
        n = prompt.numel()
        if limit is not None and n > limit:
            raise ValueError(f"{prompt_name} has {n} tokens, longer than the model's position "
                             f"limit max_position_embeddings={limit}")
        if n < order:
            raise ValueError(f"{prompt_name} must have at least order={order} tokens for this model")
        if max_new_tokens == 0:
            continue
        # The last iteration starts with n + L - 1 verified tokens; its calls reach past them.
        needed = n + max_new_tokens - 1 + spec.reach(width)
        if limit is not None and needed > limit:
            raise ValueError(f"max_new_tokens={max_new_tokens} with a {n}-token prompt exceeds the model's "
                             f"position limit {limit} (schedule {schedule!r} at width {width} places draft rows up "
                             f"to {spec.reach(width)} positions past the prefix); allowed: max_new_tokens <= "
                             f"{max(0, limit - n - spec.reach(width) + 1)}")
        if window is not None:
            # A sliding-window cache layer cannot be cropped back once it holds `window` entries:
            # every call's K/V (the verified cache plus all the call's rows) must stay below it.
            m = width if spec.reach(width) else 0          # plain AR verifies no draft
            rows = max(call_kind(kind).rows(0, m, width) for kind in spec.calls)
            held = n + max_new_tokens - 2 + rows
            if held > window - 1:
                raise ValueError(f"{type(model).__name__} over a {getattr(getattr(model, 'config', None), 'model_type', '')} "
                                 f"model with sliding-window attention of {window} positions: this decode would hold "
                                 f"{held} entries in a sliding cache layer, which transformers cannot crop back once the "
                                 f"window is full; allowed: max_new_tokens <= {max(0, window + 1 - rows - n)}")
        if drafter is not None:
            _check_positions("the drafter", drafter.max_positions,
                             drafter.positions_needed(n + max_new_tokens - 1, width),
                             f"schedule {schedule!r} with a {n}-token prompt and max_new_tokens={max_new_tokens}")
    return tensors
