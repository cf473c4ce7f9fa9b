"""The one validator of :func:`spec_lib.decode` and :func:`spec_lib.decode_batch`: every
schedule, order, drafter and option.

Every bad argument raises a ``ValueError`` (``TypeError`` for a model of the wrong kind)
naming the argument and the allowed values, before any model call.  Position limits are
checked against what the schedule's calls actually touch: drafts sit up to W (Quadratic-SS,
partial-branch: 2W + 1) positions past the verified prefix (:meth:`spec_lib.masks.CallKind.reach`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from ..masks import call_kind
from ..models import SpecModel, protocol_members
from .anyorder import ANY_ORDER_SEAM, check_order, order_policy
from .branches import BranchPolicy, branch_policy
from .stops import check_stop_sequences

#: largest speculative width / drafter block size accepted.
MAX_WIDTH = 1024
#: largest number of rows one call may evaluate (the additive mask is rows x (cache + rows)).
MAX_ROWS_PER_CALL = 8192
#: largest output length for a model without a position limit (e.g. the exact toy models).
MAX_NEW_TOKENS = 1_000_000
SEED_LIMIT = 2 ** 64
#: SetDLM's native threshold (App. E.6), the default of ``threshold``.
DEFAULT_THRESHOLD = 0.9

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


@dataclass(frozen=True)
class Request:
    """A checked decode request: the schedule's record, the prompts as tensors on the model's
    device, and the parsed options."""

    schedule: object                     # spec_lib.schedules.Schedule
    prompts: list[torch.Tensor]
    width: int
    max_new_tokens: int
    any_order: bool
    order: object = None                 # "ltr", "confidence" or a policy (any-order only)
    stops: list = field(default_factory=list)
    policy: BranchPolicy | None = None   # partial-branch only
    threshold: float = DEFAULT_THRESHOLD


def is_any_order(model) -> bool:
    """Whether ``model`` implements the any-order seam (:mod:`spec_lib.anyorder_models`)."""
    return all(hasattr(model, name) for name in ANY_ORDER_SEAM)


def validate_drafter(model, schedule: str, drafter, needed: str | None) -> None:
    """A separate drafter is given exactly when the schedule needs one, of the right kind, on
    the target's device and over its vocabulary."""
    if needed is None:
        if drafter is not None:
            raise ValueError(f"drafter is only used by the drafter-based schedules ('drafted', alias 'deer', and "
                             f"'ar_draft'); schedule {schedule!r} drafts with the model itself (pass drafter=None)")
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
    where, target = torch.device(drafter.device), torch.device(model.device)
    if where.type != target.type or (where.index or 0) != (target.index or 0):
        raise ValueError(f"drafter is on {where} and the target on {target}: move the drafter to the target's "
                         f"device (their tensors meet in every cycle)")


def _check_positions(owner: str, limit: int | None, needed: int, what: str) -> None:
    if limit is not None and needed > limit:
        raise ValueError(f"{what} needs position ids up to {needed - 1}, beyond {owner}'s limit of {limit} "
                         f"positions; shorten the prompt or max_new_tokens, or lower width")


def _check_model(model, any_order: bool, order) -> None:
    if any_order:
        missing = [name for name in ANY_ORDER_SEAM if not hasattr(model, name)]
        if missing:
            raise ValueError(f"order={order!r} needs a model with an any-order mode (spec_lib.anyorder_models."
                             f"AnyOrderLM or ExactAnyOrderLM); {type(model).__name__} lacks {missing}")
        return
    if not all(hasattr(model, name) for name in SPEC_MODEL_API):      # (a Protocol check is slow)
        hint = (" (wrap a transformers model: spec_lib.models.DualModeLM(hf_model, mask_token_id))"
                if hasattr(model, "config") else "")
        raise TypeError(f"model must implement spec_lib.models.SpecModel, got {type(model).__name__}{hint}")


def validate(model, prompts: list, *, schedule, width, max_new_tokens, temperature=0.0, eos_token_id=None,
             seed=None, draft_top_k=None, draft_top_p=None, drafter=None, order=None, stop_sequences=None,
             branches=None, threshold=None, trace=False, ablation=None, batch: bool = False,
             prompt_name: str = "prompt_ids") -> Request:
    """Check every argument of a decode (``batch``: of :func:`spec_lib.decode_batch`) before any
    model call; returns the :class:`Request`."""
    from . import ALL_SCHEDULES, ANY_ORDER_ABLATION_NAMES, SCHEDULE_SPECS, resolve

    spec = resolve(schedule)
    if spec is None:
        raise ValueError(f"schedule must be one of {list(ALL_SCHEDULES)}, got {schedule!r}")
    any_order = order is not None or (is_any_order(model) and not batch)
    _check_model(model, any_order, order)
    name = spec.name
    if any_order:
        if not spec.any_order:
            allowed = [n for n, s in SCHEDULE_SPECS.items() if s.any_order]
            raise ValueError(f"schedule {schedule!r} does not run under order= (any-order verification); "
                             f"allowed: {allowed}")
        given = {"temperature": temperature != 0, "seed": seed is not None, "draft_top_k": draft_top_k is not None,
                 "draft_top_p": draft_top_p is not None, "drafter": drafter is not None,
                 "branches": branches is not None}
        extra = sorted(k for k, v in given.items() if v)
        if extra:
            raise ValueError(f"any-order decoding is greedy with the model's own drafts; it takes no {extra}")
        if not (isinstance(temperature, numbers.Real) and not isinstance(temperature, bool)):
            raise ValueError(f"temperature must be 0 for any-order decoding, got {temperature!r}")
        if ablation is not None and (name == "native" or ablation not in ANY_ORDER_ABLATION_NAMES):
            allowed = [None] if name == "native" else [None, *ANY_ORDER_ABLATION_NAMES]
            raise ValueError(f"ablation must be one of {allowed} for any-order {name!r}, got {ablation!r}")
    else:
        if spec.run is None:
            raise ValueError(f"schedule {schedule!r} runs only under order= on an any-order model "
                             f"(spec_lib.anyorder_models.AnyOrderLM or ExactAnyOrderLM)")
        if trace:
            raise ValueError("trace applies to any-order decoding only (pass order= and an any-order model)")
        if ablation is not None and ablation not in spec.ablations:
            raise ValueError(f"ablation must be one of {[None, *spec.ablations]} for schedule {name!r}, "
                             f"got {ablation!r}")
        if ablation is not None and stop_sequences is not None:
            raise ValueError("stop_sequences cannot be combined with an ablation")
    if branches is not None and "branches" not in spec.options:
        raise ValueError(f"branches applies to schedule 'partial' only, got schedule {schedule!r}")
    if threshold is not None and "threshold" not in spec.options:
        raise ValueError(f"threshold applies to schedule 'native' only, got schedule {schedule!r}")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, numbers.Real)
                                  or not 0.0 < threshold <= 1.0):
        raise ValueError(f"threshold must be in (0, 1], got {threshold!r}")
    policy = branch_policy("full" if branches is None else branches) if "branches" in spec.options else None
    if batch and not spec.batch:
        allowed = [n for n, s in SCHEDULE_SPECS.items() if s.batch]
        raise ValueError(f"decode_batch runs the schedules {allowed} (alias 'deer'), got {schedule!r}")
    if not is_int(width) or not 1 <= width <= MAX_WIDTH:
        raise ValueError(f"width must be an int in [1, {MAX_WIDTH}] (the number of draft tokens per verification: "
                         f"W of seed 000, k of seed 001, W - 1 of seed 002), got {width!r}")
    width = int(width)
    rows = max(call_kind(kind).rows(0, width, width) for kind in spec.calls if kind != "native") \
        if name != "native" else width
    if policy is not None:
        rows = call_kind("packed").rows(0, width, width) + policy.size * (width + 1)
    if rows > MAX_ROWS_PER_CALL:
        raise ValueError(f"width={width} gives {rows} rows per call for schedule {name!r}"
                         f"{f' with branches={policy.name!r}' if policy else ''}, above the limit of "
                         f"{MAX_ROWS_PER_CALL}; allowed: a smaller width{' or fewer branches' if policy else ''}")
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
    if not any_order:
        validate_drafter(model, schedule, drafter, spec.drafter)
    if name == "ar_draft" and (draft_top_k is not None or draft_top_p is not None):
        raise ValueError("draft_top_k / draft_top_p are not supported with schedule 'ar_draft' "
                         "(its Q is stored densely, one row per drafter pass)")
    if policy is not None:
        from ..models import DualModeLM
        from ..toy import ExactModel

        if not isinstance(model, (DualModeLM, ExactModel)):
            raise TypeError(f"model must be a spec_lib.models.DualModeLM or a spec_lib.toy exact model for "
                            f"partial-branch decoding, got {type(model).__name__}")
    stops = check_stop_sequences(stop_sequences, max(max_new_tokens, 1) if any_order else max_new_tokens)
    if any_order and name != "native":
        check_order(order_policy("ltr" if order is None else order), width, max_new_tokens)
    tensors = [as_prompt_tensor(p, vocab, torch.device("cpu") if any_order else model.device, prompt_name)
               for p in prompts]
    model_order = getattr(model, "order", 1)
    window = getattr(model, "attention_window", None)
    for prompt in tensors:
        n = prompt.numel()
        if limit is not None and n > limit:
            raise ValueError(f"{prompt_name} has {n} tokens, longer than the model's position "
                             f"limit max_position_embeddings={limit}")
        if n < model_order:
            raise ValueError(f"{prompt_name} must have at least order={model_order} tokens for this model")
        if max_new_tokens == 0:
            continue
        if any_order:
            if limit is not None and n + max_new_tokens > limit:
                raise ValueError(f"prompt ({n}) + max_new_tokens ({max_new_tokens}) exceeds the model's {limit} "
                                 f"positions")
            continue
        # The last iteration starts with n + L - 1 verified tokens; its calls reach past them.
        needed = n + max_new_tokens - 1 + spec.reach(width)
        if limit is not None and needed > limit:
            raise ValueError(f"max_new_tokens={max_new_tokens} with a {n}-token prompt exceeds the model's "
                             f"position limit {limit} (schedule {name!r} at width {width} places draft rows up "
                             f"to {spec.reach(width)} positions past the prefix); allowed: max_new_tokens <= "
                             f"{max(0, limit - n - spec.reach(width) + 1)}")
        if window is not None:
            # A sliding-window cache layer cannot be cropped back once it holds `window` entries:
            # every call's K/V (the verified cache plus all the call's rows) must stay below it.
            m = width if spec.reach(width) else 0          # plain AR verifies no draft
            call_rows = rows if policy is not None else max(call_kind(kind).rows(0, m, width) for kind in spec.calls)
            held = n + max_new_tokens - 2 + call_rows
            if held > window - 1:
                raise ValueError(f"{type(model).__name__} over a {getattr(getattr(model, 'config', None), 'model_type', '')} "
                                 f"model with sliding-window attention of {window} positions: this decode would hold "
                                 f"{held} entries in a sliding cache layer, which transformers cannot crop back once the "
                                 f"window is full; allowed: max_new_tokens <= {max(0, window + 1 - call_rows - n)}")
        if drafter is not None:
            _check_positions("the drafter", drafter.max_positions,
                             drafter.positions_needed(n + max_new_tokens - 1, width),
                             f"schedule {name!r} with a {n}-token prompt and max_new_tokens={max_new_tokens}")
    return Request(spec, tensors, width, max_new_tokens, any_order, "ltr" if any_order and order is None else order,
                   stops, policy, DEFAULT_THRESHOLD if threshold is None else float(threshold))
