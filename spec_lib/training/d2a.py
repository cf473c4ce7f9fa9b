"""DEER's drafter objectives: masked-diffusion pre-training and D2A alignment (Stages I, II).

References (seed 001, Sec. 3.4):
  * pre-trained dLLM: corrupt a sequence at level t (each token -> MASK with probability
    t), cross-entropy on the masked positions weighted by 1/t;
  * Stage I, AR-style continuation distillation (Eq. 1-2): a teacher answer is truncated
    after r ~ U(1, L - l_q) tokens, the input is ``[prefix][kept answer][SEP][MASK]*``, the
    kept tokens are noised at level t, the loss is on the suffix masks only, weighted 1/t;
  * Stage II, scribe refinement (Eq. 3-4): only the last R ~ U(1, R_max) answer tokens are
    masked, and the i-th of them is weighted w_i = alpha^(R - i) (1/t retained).  Our
    teacher answers are unterminated continuations (corpus windows have no natural end, and
    a small target's greedy text grows repetitive towards the end), so the cpu-scale
    configuration first cuts each answer at a random end in U(R + 1, L_a): "the last R
    tokens" then lie anywhere in it.

Every batch is a :class:`DiffusionBatch`: token ids, a full (bidirectional) additive mask that
only hides right padding, and the positions, targets and weights of the loss.  The loss runs
the model once and projects only the scored positions through the LM head.

Two configurations of these objectives (:data:`spec_lib.training.deer.D2A_PRESETS`):

* **as written** (the ``faithful`` presets): Stage I keeps r ~ U(1, L_a - 1) answer tokens,
  masks the known tokens (prefix and kept answer) at the current level t
  (``context_noise=1``), reads the whole prefix (``min_context = context`` = prompt + answer
  length) and masks the whole remaining answer after [SEP] (``max_suffix=None``); Stage II
  masks the last R ~ U(1, R_max) tokens of the teacher answer itself
  (``stage2_cut="answer_end"``, R_max = 96 as in the paper) and nothing else ("in practice
  only the refinement segment is masked": ``stage2_noise=False``);
* **cpu-scale** (this project's choices where the paper works at another scale): the masked
  suffix of Stage I is capped at ``max_suffix`` tokens (the largest drafting block, 32), with
  its length uniform in 1..max_suffix when the answer allows it, so every block size k of
  inference is seen; the conditioning context is the last ``c ~ U(min_context, context)``
  tokens before SEP (the drafter reads at most ``context`` tokens at inference); the kept
  tokens are masked with probability ``context_noise * t`` (0.2 t) in both stages; Stage II
  cuts each answer at a random end first (``stage2_cut="random"``, see above) with R_max = 32.

Both draw t from U(t_min, 1) so that 1/t stays bounded.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..masks.predicates import padded_visible, to_additive


@dataclass
class DiffusionBatch:
    """One training batch of a bidirectional drafter.

    Attributes:
        input_ids: ``(N, T)`` tokens (MASK at corrupted and suffix positions, PAD after).
        attention_mask: ``(N, 1, T, T)`` additive: 0 everywhere except padding keys.
        rows, cols: ``(M,)`` the scored positions.
        targets: ``(M,)`` the clean token at each scored position.
        weights: ``(M,)`` loss weight (1/t, times alpha^(R-i) in Stage II).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    rows: torch.Tensor
    cols: torch.Tensor
    targets: torch.Tensor
    weights: torch.Tensor


def padding_mask(lengths: torch.Tensor, padded_len: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``(N, 1, T, T)`` additive mask: every position sees every non-padding key (right padding)."""
    return to_additive(padded_visible(lengths, padded_len), dtype)[:, None]


def sample_t(n: int, t_min: float, generator: torch.Generator) -> torch.Tensor:
    """Noise levels t ~ U(t_min, 1)."""
    return t_min + (1 - t_min) * torch.rand(n, generator=generator)


def masked_diffusion_batch(sequences: torch.Tensor, *, mask_token_id: int, generator: torch.Generator,
                           t_min: float = 0.1) -> DiffusionBatch:
    """Standard masked-diffusion pre-training: mask each token with probability t, score the
    masked ones with weight 1/t (every row has at least one masked token)."""
    n, length = sequences.shape
    t = sample_t(n, t_min, generator)
    masked = torch.rand(n, length, generator=generator) < t[:, None]
    force = torch.randint(0, length, (n,), generator=generator)
    masked[torch.arange(n), force] = True
    rows, cols = masked.nonzero(as_tuple=True)
    ids = sequences.masked_fill(masked, mask_token_id)
    return DiffusionBatch(ids, padding_mask(torch.full((n,), length), length), rows, cols,
                          sequences[rows, cols], (1.0 / t)[rows])


def continuation_batch(prompts: torch.Tensor, answers: torch.Tensor, *, stage: int, mask_token_id: int,
                       sep_token_id: int, pad_token_id: int, generator: torch.Generator, context: int,
                       min_context: int = 16, max_suffix: int | None = 32, r_max: int = 32, alpha: float = 1.01,
                       t_min: float = 0.1, context_noise: float = 1.0, stage2_cut: str = "random",
                       stage2_noise: bool = True) -> DiffusionBatch:
    """Stage I (``stage=1``) or Stage II (``stage=2``) rows from teacher answers.

    Args:
        prompts: ``(N, l_q)`` prompt tokens; answers: ``(N, L_a)`` the teacher's answers.
        stage: 1 = continuation distillation (Eq. 1-2), 2 = scribe refinement (Eq. 3-4).
        context: longest conditioning context (tokens before SEP); min_context: shortest.
        max_suffix: Stage I masks at most this many suffix tokens, of a length drawn uniformly;
            None masks the whole rest of the answer (as written).
        r_max: Stage II's R_max.  alpha: Stage II weight base, w_i = alpha^(R - i).
        context_noise: context tokens (prefix and kept answer) are masked with probability
            ``context_noise * t``; in Stage II only with ``stage2_noise`` (as written, "only the
            refinement segment is masked").
        stage2_cut: ``"answer_end"``: Stage II's R tokens end the answer (as written);
            ``"random"``: the answer is first cut at a random end in U(R + 1, L_a).
    """
    if stage not in (1, 2):
        raise ValueError(f"stage must be 1 or 2, got {stage!r}")
    if stage2_cut not in ("random", "answer_end"):
        raise ValueError(f"stage2_cut must be 'random' or 'answer_end', got {stage2_cut!r}")
    if max_suffix is not None and (isinstance(max_suffix, bool) or not isinstance(max_suffix, int) or max_suffix < 1):
        raise ValueError(f"max_suffix must be None or an int >= 1, got {max_suffix!r}")
    n, answer_len = answers.shape
    if answer_len < 2:
        raise ValueError(f"answers must have at least 2 tokens, got {answer_len}")
    t = sample_t(n, t_min, generator)
    u = torch.rand(n, 3, generator=generator)
    if stage == 1:       # kept r ~ U(1, L_a - 1); suffix = the rest (or capped, length U(1, cap))
        kept = 1 + (u[:, 0] * (answer_len - 1)).long()
        if max_suffix is None:
            suffix = answer_len - kept
        else:
            cap = torch.clamp(answer_len - kept, max=max_suffix)
            suffix = 1 + (u[:, 1] * cap).long()
    else:                # the last R ~ U(1, R_max) tokens of the answer (or of one cut at a random end)
        suffix = 1 + (u[:, 0] * min(r_max, answer_len - 1)).long()
        if stage2_cut == "answer_end":
            end = torch.full_like(suffix, answer_len)
        else:
            end = suffix + 1 + (u[:, 1] * (answer_len - suffix)).long()        # U(R + 1, L_a)
        kept = end - suffix
    ctx_len = min_context + (u[:, 2] * (context - min_context + 1)).long().clamp(max=context - min_context)
    full = torch.cat([prompts, answers], 1)
    l_q = prompts.shape[1]
    ctx_len = torch.minimum(ctx_len, l_q + kept)                      # no more context than the prefix has
    padded_len = int((ctx_len + 1 + suffix).max())
    ids = torch.full((n, padded_len), pad_token_id, dtype=torch.long)
    rows, cols, targets, weights, lengths = [], [], [], [], []
    for b in range(n):                    # per-row slicing of ragged pieces (training only)
        end = l_q + int(kept[b])
        c = int(ctx_len[b])
        s = int(suffix[b])
        ctx = full[b, end - c: end].clone()
        noisy = torch.rand(c, generator=generator) < (context_noise * t[b] if stage == 1 or stage2_noise else 0.0)
        ctx[noisy] = mask_token_id
        ids[b, :c] = ctx
        ids[b, c] = sep_token_id
        ids[b, c + 1: c + 1 + s] = mask_token_id
        rows.append(torch.full((s,), b))
        cols.append(torch.arange(c + 1, c + 1 + s))
        targets.append(full[b, end: end + s])
        i = torch.arange(1, s + 1, dtype=torch.float32)
        w = alpha ** (s - i) if stage == 2 else torch.ones(s)
        weights.append(w / t[b])
        lengths.append(c + 1 + s)
    return DiffusionBatch(ids, padding_mask(torch.tensor(lengths), padded_len), torch.cat(rows), torch.cat(cols),
                          torch.cat(targets), torch.cat(weights))


def diffusion_loss(hf_model, batch: DiffusionBatch) -> tuple[torch.Tensor, dict[str, float]]:
    """Weighted CE at the scored positions, normalised by their number:
    sum_i w_i CE_i / M (w_i = 1/t, times alpha^(R-i) in Stage II).  Also reports the
    unweighted CE and the top-1 accuracy of the scored positions."""
    device = next(hf_model.parameters()).device
    dtype = next(hf_model.parameters()).dtype
    hidden = hf_model.base_model(input_ids=batch.input_ids.to(device),
                                 attention_mask=batch.attention_mask.to(device, dtype)).last_hidden_state
    logits = hf_model.get_output_embeddings()(hidden[batch.rows.to(device), batch.cols.to(device)]).float()
    targets = batch.targets.to(device)
    ce = F.cross_entropy(logits, targets, reduction="none")
    loss = (batch.weights.to(device) * ce).sum() / ce.numel()
    with torch.no_grad():
        accuracy = (logits.argmax(-1) == targets).float().mean()
    return loss, {"loss": float(loss.detach()), "ce": float(ce.detach().mean()), "accuracy": float(accuracy)}
