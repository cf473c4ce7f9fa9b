"""A tiny any-order (SetDLM-style) model trained here (seed 000, App. C-E; SetDLM's training
construction), for the any-order schedules of :mod:`spec_lib.schedules.anyorder`.

Each training window of ``seq_len`` tokens starts at a synthetic math problem (the templates of
:func:`spec_lib.training.data.math_problem`, operands 2..``operand_max``) and runs on into the
following problems; its prompt is the problem's ``Question: ...\nAnswer:`` (as at evaluation),
the rest is the response.  One generation order per window: the prompt first, then the
response in SetDLM's *staggered*
order (first-hitting times ``T_i = loc_i + b (1 - exp(-E_i / k))`` with ``b = 2S / (L + 2S - 1)``,
``area = S / (2L)``, ``k = area / (b - area)``: left to right up to a local shuffle of
horizon 2S, S the prediction budget), or with probability ``identity_share`` the identity
order, so that left-to-right queries are dense.  The window is laid out as three streams of
``seq_len`` rows each, every row with its textual position id:

  * **token rows**, causal in the generation order (rank(k) <= rank(q));
  * **verifier mask rows** (SetDLM's duplicate masks): a mask at j sees the tokens strictly
    earlier in the order and itself: p(x_j | P, x_{sigma(<r)}), the M rows of App. D.2;
  * **draft mask rows** (not in SetDLM; the R rows of Packed-SS): the response order is cut
    into consecutive chunks of random size <= ``max_chunk``; a mask at j sees the tokens ranked
    before j's chunk and itself: p(x_j | P_{t-1}), the drafting query.

Loss: CE on both mask streams at response positions (MASK never a target; its logit is
excluded), equal weights.  Two presets stand for SetDLM's checkpoints: ``smax16`` (S = 8,
evaluated at W = 8) and ``smax32`` (S = 16, W = 16), the latter continued from the former
(SetDLM's checkpoints are separately adapted ones too, App. E.1).  Checkpoints are cached
under ``artifacts/anyorder/<key>/`` with their tokenizer and a record.  Training resumes from the
last save: the loop saves its state under ``artifacts/anyorder/<key>.partial/``.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from ..architectures import build_qwen3
from ..masks.predicates import to_additive
from . import data
from .cache import cache_key, checkpoint_dir, checkpoint_writer, finish_partial, stage_resume
from .loop import fit

PIPELINE = "spec_lib.training.any_order"
PRESETS = ("smax16", "smax32")


@dataclass(frozen=True)
class AnyOrderConfig:
    """Model shape, data and optimisation of one any-order checkpoint."""

    prediction_budget: int = 8          # S (SetDLM's smax = 2S)
    max_chunk: int = 8                  # largest drafting window of the R stream (W)
    identity_share: float = 0.3
    vocab_size: int = 384
    hidden_size: int = 160
    num_layers: int = 4
    num_heads: int = 4
    max_positions: int = 512
    seq_len: int = 96
    batch_size: int = 16
    steps: int = 1000
    lr: float = 3e-3
    warmup: int = 40
    eval_every: int = 200
    train_problems: int = 20_000
    operand_max: int | None = 9         # operands 2..operand_max (None: the math slice's 2..39)
    init_from: str | None = None        # a preset this one continues from
    seed: int = 0


#: presets per profile: (smax16, smax32)
CONFIGS: dict[str, dict[str, AnyOrderConfig]] = {
    "smoke": {"smax16": AnyOrderConfig(prediction_budget=2, max_chunk=2, hidden_size=32,
                                        num_layers=2, num_heads=2, seq_len=64, batch_size=4, steps=20,
                                        eval_every=10, train_problems=400),
              "smax32": AnyOrderConfig(prediction_budget=4, max_chunk=4, hidden_size=32,
                                        num_layers=2, num_heads=2, seq_len=64, batch_size=4, steps=10,
                                        eval_every=10, train_problems=400, init_from="smax16")},
    "cpu": {"smax16": AnyOrderConfig(),
            "smax32": AnyOrderConfig(prediction_budget=16, max_chunk=16, steps=360, lr=1.5e-3, warmup=20,
                                     init_from="smax16")},
}


def preset(profile: str, name: str) -> AnyOrderConfig:
    if profile not in CONFIGS:
        raise ValueError(f"profile must be one of {list(CONFIGS)}, got {profile!r}")
    if name not in CONFIGS[profile]:
        raise ValueError(f"preset must be one of {list(CONFIGS[profile])}, got {name!r}")
    return CONFIGS[profile][name]


# ----- orders and the three-stream layout -------------------------------------------------------------

def staggered_order(length: int, budget: int, generator: torch.Generator) -> torch.Tensor:
    """SetDLM's staggered generation order of ``length`` response positions (see the module
    docstring): a permutation, left to right up to a local shuffle of horizon 2S."""
    if length <= 1:
        return torch.arange(length)
    b = 2 * budget / (length + 2 * budget - 1)
    area = budget / (2 * length)
    k = area / (b - area)
    loc = (1 - b) * (length - 1 - torch.arange(length, dtype=torch.float64)) / (length - 1)
    e = torch.empty(length, dtype=torch.float64).exponential_(1.0, generator=generator)
    hitting = loc + b * (1 - torch.exp(-e / k))
    return torch.sort(hitting, descending=True, stable=True).indices


def sample_order(seq_len: int, prompt: int, config: AnyOrderConfig, generator: torch.Generator) -> torch.Tensor:
    """The rank of each position of a window whose first ``prompt`` tokens are the prompt."""
    response = seq_len - prompt
    if float(torch.rand(1, generator=generator)) < config.identity_share:
        order = torch.arange(response)
    else:
        order = staggered_order(response, config.prediction_budget, generator)
    perm = torch.cat([torch.arange(prompt), prompt + order])          # generation order -> position
    rank = torch.empty(seq_len, dtype=torch.long)
    rank[perm] = torch.arange(seq_len)
    return rank


def chunk_starts(rank: torch.Tensor, prompt: int, max_chunk: int, generator: torch.Generator) -> torch.Tensor:
    """For each position, the rank where its drafting chunk starts (prompt positions: their own rank)."""
    n = rank.numel()
    starts = torch.arange(n)
    r = prompt
    while r < n:
        size = int(torch.randint(1, max_chunk + 1, (1,), generator=generator))
        starts[r: r + size] = r
        r += size
    return starts[rank]                                              # per position


def three_stream_visible(rank: torch.Tensor, chunk_start: torch.Tensor) -> torch.Tensor:
    """``(3n, 3n)`` visibility over [token rows | verifier masks | draft masks] of one window."""
    n = rank.numel()
    rq, rk = rank[:, None], rank[None, :]
    eye = torch.eye(n, dtype=torch.bool)
    none = torch.zeros(n, n, dtype=torch.bool)
    token = rk <= rq
    verify = rk < rq
    draft = rk < chunk_start[:, None]
    return torch.cat([torch.cat([token, none, none], 1),
                      torch.cat([verify, eye, none], 1),
                      torch.cat([draft, none, eye], 1)], 0)


def make_batch(windows: torch.Tensor, prompts: torch.Tensor, config: AnyOrderConfig, mask_token_id: int,
               generator: torch.Generator):
    """Inputs, positions, additive masks and targets of a batch of windows ``(B, n)`` whose first
    ``prompts[b]`` tokens are the prompt."""
    batch, n = windows.shape
    ids, visible, targets = [], [], []
    for row, prompt in zip(windows, prompts.tolist()):
        rank = sample_order(n, prompt, config, generator)
        visible.append(three_stream_visible(rank, chunk_starts(rank, prompt, config.max_chunk, generator)))
        masks = torch.full((n,), mask_token_id)
        ids.append(torch.cat([row, masks, masks]))
        target = row.clone()
        target[:prompt] = -100                                       # the prompt is given
        targets.append(torch.cat([torch.full((n,), -100), target, target]))
    positions = torch.arange(n).repeat(3)[None].expand(batch, -1)
    mask = to_additive(torch.stack(visible), torch.float32)[:, None]
    return torch.stack(ids), positions, mask, torch.stack(targets)


def any_order_loss(model, batch, mask_token_id: int) -> tuple[torch.Tensor, dict[str, float]]:
    ids, positions, mask, targets = batch
    logits = model(input_ids=ids, position_ids=positions, attention_mask=mask.to(model.dtype)).logits
    logits = logits.float().index_fill(-1, torch.tensor([mask_token_id]), -torch.inf)
    n = ids.shape[1] // 3
    verify = torch.nn.functional.cross_entropy(logits[:, n: 2 * n].flatten(0, 1), targets[:, n: 2 * n].flatten())
    draft = torch.nn.functional.cross_entropy(logits[:, 2 * n:].flatten(0, 1), targets[:, 2 * n:].flatten())
    return verify + draft, {"verify_ce": float(verify.detach()), "draft_ce": float(draft.detach())}


# ----- data, training and the cache -----------------------------------------------------------------------

class _SmallOperands:
    """A stand-in for the ``np.random.Generator`` that :func:`spec_lib.training.data.math_problem`
    draws from: its operands (``integers(2, 40, ...)``) come from ``2..operand_max`` instead;
    every other draw passes through."""

    def __init__(self, rng: np.random.Generator, operand_max: int) -> None:
        self.rng, self.operand_max = rng, operand_max

    def integers(self, low, high=None, size=None):
        return self.rng.integers(low, self.operand_max + 1 if high == 40 else high, size)

    def choice(self, *args, **kwargs):
        return self.rng.choice(*args, **kwargs)


def problems(n: int, seed: int, operand_max: int | None) -> list:
    """``n`` seeded math problems (the math slice's templates; operands 2..``operand_max``)."""
    rng = np.random.default_rng(seed)
    source = rng if operand_max is None else _SmallOperands(rng, operand_max)
    return [data.math_problem(source) for _ in range(n)]


@dataclass
class Examples:
    """Problems tokenized back to back: the stream, where each problem starts, its prompt length."""

    stream: np.ndarray
    starts: np.ndarray
    prompt_lengths: np.ndarray

    def windows(self, seq_len: int, count: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """``count`` windows starting at random problems, and their prompt lengths."""
        usable = int((self.starts + seq_len <= len(self.stream)).sum())
        pick = torch.randint(0, usable, (count,), generator=generator).numpy()
        ids = np.stack([self.stream[s: s + seq_len] for s in self.starts[pick]]).astype(np.int64)
        return torch.from_numpy(ids), torch.from_numpy(self.prompt_lengths[pick].astype(np.int64))


def tokenize_problems(items: list, tokenizer) -> Examples:
    texts = tokenizer([p.text() for p in items], add_special_tokens=False)["input_ids"]
    prompts = tokenizer([p.prompt() for p in items], add_special_tokens=False)["input_ids"]
    for text, prompt in zip(texts, prompts):
        if text[: len(prompt)] != prompt:
            raise RuntimeError("a problem's prompt does not tokenize as a prefix of its text")
    lengths = np.array([len(t) for t in texts])
    return Examples(np.concatenate([np.array(t, dtype=np.int32) for t in texts]),
                    np.concatenate([[0], np.cumsum(lengths)[:-1]]), np.array([len(p) for p in prompts]))


def corpus(config: AnyOrderConfig):
    """Tokenizer trained on the training problems; train and held-out :class:`Examples`."""
    train_items = problems(config.train_problems, config.seed * 1_000_003 + 1, config.operand_max)
    docs = ["".join(p.text() for p in train_items[i: i + 8]) for i in range(0, len(train_items), 8)]
    tokenizer = data.train_tokenizer(docs, config.vocab_size)
    heldout = problems(400, 20_000 + config.seed, config.operand_max)
    return tokenizer, tokenize_problems(train_items, tokenizer), tokenize_problems(heldout, tokenizer)


def checkpoint_key(profile: str, name: str) -> str:
    config = preset(profile, name)
    parent = checkpoint_key(profile, config.init_from) if config.init_from else None
    return cache_key(PIPELINE, config=asdict(config), parent=parent, python=data.python_version())


@dataclass
class TrainedAnyOrder:
    model: object
    tokenizer: object
    record: dict
    path: Path


def train(profile: str, name: str, progress: bool = True, key: str = "") -> TrainedAnyOrder:
    """Train (or continue from ``init_from``) one preset and cache it; with the checkpoint ``key``,
    the training resumes from its last save."""
    config = preset(profile, name)
    wall_started = time.perf_counter()
    tokenizer, train_examples, heldout_examples = corpus(config)
    mask_id = tokenizer.convert_tokens_to_ids(data.SPECIAL_TOKENS["mask"])
    if config.init_from:
        model = load_or_train(profile, config.init_from, progress).model
    else:
        model = build_qwen3(len(tokenizer), hidden_size=config.hidden_size, num_layers=config.num_layers,
                            num_heads=config.num_heads, max_positions=config.max_positions, seed=config.seed)
    generator = torch.Generator().manual_seed(config.seed + 1)

    def batch(examples, gen):
        ids, prompts = examples.windows(config.seq_len, config.batch_size, gen)
        return make_batch(ids, prompts, config, mask_id, gen)

    eval_gen = torch.Generator().manual_seed(config.seed + 2)
    eval_batches = [batch(heldout_examples, eval_gen) for _ in range(4)]
    started = time.perf_counter()
    resume = stage_resume("anyorder", key, f"any-order {name}", [generator]) if key else None
    history = fit(model, lambda step: batch(train_examples, generator),
                  lambda m, batch: any_order_loss(m, batch, mask_id), steps=config.steps, lr=config.lr,
                  warmup=config.warmup, eval_batches=eval_batches, eval_every=config.eval_every,
                  label=f"any-order {name}", progress=progress, resume=resume)
    model.eval()
    before = resume.restored_seconds if resume else 0.0      # trained before this process
    record = {"preset": name, "profile": profile, "config": asdict(config),
              "seconds": time.perf_counter() - started + before,
              "wall_seconds": time.perf_counter() - wall_started + before,
              "parameters": int(sum(p.numel() for p in model.parameters())), "mask_token_id": int(mask_id),
              "history": history}
    path = checkpoint_dir("anyorder", checkpoint_key(profile, name))
    with checkpoint_writer(path) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "record.json").write_text(json.dumps(record, indent=1))
    return TrainedAnyOrder(model, tokenizer, record, path)


def load_or_train(profile: str, name: str, progress: bool = True) -> TrainedAnyOrder:
    """The cached checkpoint of a preset, trained first if missing."""
    path = checkpoint_dir("anyorder", checkpoint_key(profile, name))
    if not (path / "record.json").is_file():
        trained = train(profile, name, progress, key=path.name)
        finish_partial("anyorder", path.name)
        return trained
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    model = AutoModelForCausalLM.from_pretrained(path).eval()
    tokenizer = PreTrainedTokenizerFast.from_pretrained(path)
    return TrainedAnyOrder(model, tokenizer, json.loads((path / "record.json").read_text()), path)


