"""The behavioural fingerprint of the decoding core: what the core *does*, hashed, so that a
refactor that keeps behaviour keeps every result current.

A fixed battery runs the core in float64 on small random models (Qwen3, Llama, GPT-2), exact toy
models and random drafters: every schedule (AR, Linear-, Quadratic-, Packed-SS; DEER's and an AR
drafter's block drafting; DEdit / DFlash block editing, Domino, DSpark; partial branches; a
proposal-only LoRA), greedy and sampled with fixed seeds, left to right and any order, stop
sequences, EOS, batches of several prompts, the static-cache (compiled) path run eagerly, and
the mask of every layout at a few widths.  Each :data:`COMPONENTS` entry hashes what its part of
the battery saw: the tokens, NFE, accepted lengths and rows per call of every decode, every
model call's logits and every verification's draft and stored Q (rounded to
:data:`DECIMALS` decimals, far above float64 noise across CPU instruction sets), and the
layouts' ids, positions and visibility.

A notebook's code version (:mod:`spec_lib.notebook.versions`) includes the hash of each
component whose modules it imports.  The fingerprint is cached on disk by the syntax trees of
the modules it covers and the versions of torch and transformers (:func:`fingerprint`): a
comment, a docstring or a reformatting does not rerun the battery, and an edit that does rerun
it changes the fingerprint only where behaviour changed.

What it cannot see: speed (a change made to be faster reruns the notebooks and benchmarks whose
timings it claims to change); branches the battery does not reach: float32, bfloat16 and CUDA
code paths (the battery runs float64 on the CPU, so that its hashes are the same on every CPU),
torch.compile'd graphs (the static-cache path runs eagerly), FlexAttention
(:mod:`spec_lib.attention` is compared as code instead, :data:`CODE_COMPARED`); a new module
inside a covered package counts as covered (a module split must keep results current), so its
behaviour is seen only as far as the battery's calls reach it.  ``tests/test_versions.py``
checks that the battery executes code of every covered module.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

DECIMALS = 6
VOCAB = 12                   # small, so that random drafts are sometimes accepted
MASK_ID = VOCAB - 1
SEP_ID = VOCAB - 2
EOS_ID = 3

#: Core modules that the battery does not exercise; notebooks compare their code (AST) instead.
CODE_COMPARED = ("spec_lib.attention",)


class Recorder:
    """Collects what a component's battery saw, as canonical JSON, and hashes it."""

    def __init__(self) -> None:
        self.items: list = []

    def add(self, label: str, value) -> None:
        self.items.append([label, _canonical(value)])

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.items, separators=(",", ":")).encode()).hexdigest()[:16]


def _canonical(value):
    import torch

    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        if value.dtype == torch.bool:
            return ["bool", list(value.shape), value.flatten().int().tolist()]
        if value.is_floating_point():
            value = value.double()
            ordinary = value.isfinite() & (value.abs() < 1e12)     # masks hold the dtype's minimum
            rounded = torch.round(torch.where(ordinary, value, 0.0) * 10 ** DECIMALS).long()
            special = torch.where(value.isnan(), 3, torch.where(value > 0, 2, 1))   # nan, large +, large -
            coded = torch.where(ordinary, rounded, -special)            # rounded values, or a code < 0 ...
            flags = (~ordinary).int()                                  # ... told apart by this flag
            return ["float", list(value.shape), coded.flatten().tolist(), flags.flatten().tolist()]
        return ["int", list(value.shape), value.flatten().tolist()]
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, float):
        return round(value, DECIMALS)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if hasattr(value, "dense"):                                    # a sparse stored Q
        return _canonical(value.dense())
    raise TypeError(f"cannot fingerprint a {type(value).__name__}")


@contextlib.contextmanager
def watching(rec: Recorder):
    """Record every counted model call (its logits) and every verification (draft, stored Q)
    of the left-to-right decodes run inside (wraps :class:`spec_lib.schedules.state.Decoding`)."""
    from ..schedules import state

    call, verify_and_append = state.Decoding.call, state.Decoding.verify_and_append

    def watched_call(self, kind, draft=None):
        out = call(self, kind, draft)
        name = kind if isinstance(kind, str) else f"{kind.name}{getattr(kind, 'branches', '')}"
        rec.add("call", {"kind": name, "rows": out.rows, "target": out.target_logits, "draft": out.draft_logits})
        return out

    def watched_verify(self, out, draft, q_stored, q_verify=None):
        h, a = verify_and_append(self, out, draft, q_stored, q_verify)
        rec.add("verify", {"draft": draft, "q": q_stored, "h": int(h), "a": int(a)})
        return h, a

    state.Decoding.call, state.Decoding.verify_and_append = watched_call, watched_verify
    try:
        yield
    finally:
        state.Decoding.call, state.Decoding.verify_and_append = call, verify_and_append


def _result(rec: Recorder, label: str, res) -> None:
    rec.add(label, {"tokens": res.tokens, "nfe": res.nfe, "accepted": res.accepted, "rows": res.rows_per_call})


# ----- the small models ------------------------------------------------------------------------------

def tiny_lm(model_type: str = "qwen3", seed: int = 0, vocab: int = VOCAB, layers: int = 2):
    """A random float64 causal LM of ``model_type`` over a small vocabulary, from its
    transformers config (untied embeddings).  Over 12 tokens, some seeds' mask-row drafts match
    the model's own greedy tokens often enough that multi-token acceptance runs (Qwen3 and Llama
    seed 2 accept up to 7 tokens at width 6); :func:`tied_qwen3` is the project's own builder."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if model_type == "gpt2":
        kwargs = dict(n_embd=32, n_layer=layers, n_head=4, n_positions=128)
    else:
        kwargs = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=128)
        if model_type == "qwen3":
            kwargs["head_dim"] = 8
        if model_type == "mistral":                               # a sliding window wider than the decodes
            kwargs["sliding_window"] = 112
    config = AutoConfig.for_model(model_type, vocab_size=vocab, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                  **kwargs)
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = AutoModelForCausalLM.from_config(config).to(torch.float64).eval()
    finally:
        torch.random.set_rng_state(state)
    return model


def tied_qwen3(seed: int = 0):
    """The project's Qwen3 (:func:`spec_lib.architectures.build_qwen3`: tied embeddings), float64."""
    import torch

    from ..architectures import build_qwen3

    return build_qwen3(VOCAB, hidden_size=32, num_layers=2, num_heads=4, max_positions=128, seed=seed,
                       dtype=torch.float64)


def _prompts(n: int = 2, seed: int = 0, low: int = 3, high: int = 9) -> list:
    import torch

    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(low, high, (n,), generator=gen).tolist()
    return [torch.randint(0, SEP_ID, (length,), generator=gen) for length in lengths]


def _decodes(rec: Recorder, model, label: str, schedules, widths, *, new: int = 14, **options) -> None:
    """Greedy, greedy with EOS, sampled, and sampled with top-k, for each schedule and width."""
    from ..decoding import decode

    variants = {"greedy": {}, "eos": {"eos_token_id": EOS_ID}, "sampled": {"temperature": 1.0, "seed": 7},
                "top_k": {"temperature": 0.7, "seed": 3, "draft_top_k": 3},
                "top_p": {"temperature": 1.3, "seed": 4, "draft_top_p": 0.8}}
    for i, prompt in enumerate(_prompts()):
        for schedule in schedules:
            for width in ((1,) if schedule == "ar" else widths):
                for name, extra in variants.items():
                    if schedule in ("ar", "ar_draft") and name in ("top_k", "top_p"):     # Q is dense there
                        continue
                    res = decode(model, prompt, schedule=schedule, width=width, max_new_tokens=new,
                                 **options, **extra)
                    _result(rec, f"{label}/{schedule}/{width}/{name}/{i}", res)


# ----- the components --------------------------------------------------------------------------------

def masks(rec: Recorder) -> None:
    """Every registered layout (and the partial-branch and any-order ones) at a few widths,
    context lengths and draft lengths: ids, positions, segments, roles, kept rows, visibility;
    the predicates behind them."""
    import torch

    from .. import masks as m
    from ..masks import anyorder, partial, predicates

    for kind in m.call_kinds():
        spec = m.call_kind(kind)
        if kind == "partial" or kind.startswith("ao_"):
            continue
        for width in (1, 2, 5):
            for n_context in (0, 3):
                for n_draft in sorted({0, 1, width}):
                    layout = m.build_layout(kind, context=torch.arange(20, 20 + n_context), last=torch.tensor([7]),
                                            draft=torch.arange(30, 30 + n_draft), width=width, mask_token_id=MASK_ID,
                                            start=4)
                    rec.add(f"{kind}/{width}/{n_context}/{n_draft}", _layout(layout, spec, n_context, n_draft, width))
    for branches in ((0,), (0, 2), (1, 2, 3)):
        for width in (3, 4):
            layout = partial.partial_layout(branches, context=torch.arange(20, 22), last=torch.tensor([7]),
                                            draft=torch.arange(30, 30 + width), width=width, mask_token_id=MASK_ID,
                                            start=5)
            rec.add(f"partial/{branches}/{width}", _layout(layout))
    for kind in anyorder.KINDS:
        for p, u in ((0, 1), (2, 3), (3, 5)):
            draft = torch.arange(40, 40 + u)
            draft[::2] = -1
            layout = anyorder.build_any_order(kind, new_ids=torch.arange(10, 10 + p), new_positions=torch.arange(p),
                                              order_positions=torch.tensor([9, 6, 8, 5, 7][:u]) + p, draft_ids=draft,
                                              mask_token_id=MASK_ID)
            rec.add(f"{kind}/{p}/{u}", {"ids": layout.input_ids, "positions": layout.position_ids,
                                       "visible": layout.visible(), "keep": layout.keep_rows,
                                       "roles": list(layout.roles), "rows": anyorder.any_order_rows(kind, p, u)})
    rec.add("predicates", {
        "padded": predicates.padded_visible(torch.tensor([2, 4]), 5),
        "padded_left": predicates.padded_visible(torch.tensor([2, 4]), 5, left=True),
        "slot": predicates.slot_visible(torch.tensor([[True, False, True]]), predicates.causal_visible(2)[None]),
        "additive": predicates.to_additive(predicates.causal_visible(3), torch.float64, cache_len=2)})


def _layout(layout, spec=None, n_context=None, n_draft=None, width=None) -> dict:
    out = {"ids": layout.input_ids, "positions": layout.position_ids, "segment": layout.segment,
           "sees": layout.sees_upto, "roles": list(layout.roles), "target": layout.target_rows,
           "draft": layout.draft_rows, "n_context": layout.n_context, "visible": layout.visible(),
           "keep": layout.keep_rows if not isinstance(layout.keep_rows, int) else ["last", layout.keep_rows]}
    if spec is not None:
        out["counted"] = spec.rows(n_context, n_draft, width)
    return out


def verification(rec: Recorder) -> None:
    """The acceptance rules on fixed inputs: greedy matching, rejection sampling with and
    without the residual, truncation of Q, sampling."""
    import torch

    from .. import verify

    gen = torch.Generator().manual_seed(0)
    for m in (0, 1, 4):
        logits = torch.randn(m + 1, VOCAB, generator=gen, dtype=torch.float64) * 3
        draft = torch.randint(0, VOCAB, (m,), generator=gen)
        draft[: m // 2] = logits[: m // 2].argmax(-1)
        rec.add(f"greedy/{m}", verify.greedy_verify(draft, logits))
        p = verify.probabilities(logits, 1.0)
        q = verify.probabilities(torch.randn(m, VOCAB, generator=gen, dtype=torch.float64), 0.8)
        for residual in (True, False):
            for seed in range(6):
                h, emitted = verify.rejection_verify(draft, q, p, torch.Generator().manual_seed(seed),
                                                     residual=residual)
                rec.add(f"rejection/{m}/{residual}/{seed}", [h, emitted])
        if m:
            for k, top_p in ((2, None), (None, 0.7), (3, 0.5)):
                sparse = verify.truncate(q, k, top_p)
                rec.add(f"truncate/{m}/{k}/{top_p}", [sparse.dense(), sparse.sample(torch.Generator().manual_seed(1))])
                h, emitted = verify.rejection_verify(draft, sparse, p, torch.Generator().manual_seed(2))
                rec.add(f"sparse/{m}/{k}/{top_p}", [h, emitted])
    # A drafter close to the target (p = 0.8 Q + 0.2 uniform-ish), drafts drawn from Q: ratios
    # p/Q near 1, so the acceptance decisions themselves (line 5) are exercised, not only rejections.
    q = verify.probabilities(torch.randn(4, VOCAB, generator=gen, dtype=torch.float64), 1.0)
    p = torch.cat([0.8 * q + 0.2 * verify.probabilities(torch.randn(4, VOCAB, generator=gen,
                                                                    dtype=torch.float64), 1.0),
                   verify.probabilities(torch.randn(1, VOCAB, generator=gen, dtype=torch.float64), 1.0)])
    close = [verify.rejection_verify(verify.sample(q, torch.Generator().manual_seed(100 + seed)), q, p,
                                     torch.Generator().manual_seed(seed)) for seed in range(48)]
    rec.add("rejection/close", close)
    weights = torch.rand(3, VOCAB, generator=gen, dtype=torch.float64)
    rec.add("sample", verify.sample(weights, torch.Generator().manual_seed(4)))


def neural_schedules(rec: Recorder) -> None:
    """AR, Linear-, Quadratic- and Packed-SS on four architectures (DualModeLM; Mistral with a
    sliding window) and on the project's tied-embedding Qwen3, and the negative-control
    ablations of rejection sampling."""
    from ..models import DualModeLM

    with watching(rec):
        for arch, seed in (("qwen3", 2), ("llama", 2), ("gpt2", 1), ("mistral", 1)):
            model = DualModeLM(tiny_lm(arch, seed=seed), MASK_ID)
            _decodes(rec, model, arch, ("ar", "linear", "quadratic", "packed"), (1, 3, 6))
        _decodes(rec, DualModeLM(tied_qwen3(seed=1), MASK_ID), "qwen3_tied", ("ar", "packed"), (3,))
    _ablations(rec)


def _ablations(rec: Recorder) -> None:
    """Each deliberately wrong variant (:data:`spec_lib.schedules.ablations.ABLATIONS`), sampled."""
    from ..decoding import decode
    from ..schedules.ablations import ABLATIONS
    from ..toy import MarkovLM

    model = MarkovLM(VOCAB, order=1, seed=23, draft_noise=0.4)
    with watching(rec):
        for ablation in ABLATIONS[1:]:
            for schedule in ("linear", "packed", "quadratic"):
                res = decode(model, [1, 2, 3], schedule=schedule, width=4, max_new_tokens=20, temperature=1.0, seed=9,
                             ablation=ablation)
                _result(rec, f"ablation/{ablation}/{schedule}", res)


def toy_schedules(rec: Recorder) -> None:
    """The same schedules on exact toy models (a Markov chain with noisy drafts, a scripted one)."""
    from ..toy import MarkovLM

    with watching(rec):
        for order, noise in ((1, 0.0), (2, 0.3)):
            model = MarkovLM(VOCAB, order=order, seed=2, eos_token_id=EOS_ID, draft_noise=noise)
            _decodes(rec, model, f"markov{order}", ("ar", "linear", "quadratic", "packed"), (2, 5), new=20)


def stop_sequences(rec: Recorder) -> None:
    """Multi-token stop sequences, every schedule (App. E.2)."""
    from ..decoding import decode
    from ..models import DualModeLM
    from ..toy import MarkovLM

    with watching(rec):
        for name, model in (("qwen3", DualModeLM(tiny_lm("qwen3", seed=3), MASK_ID)), ("markov", MarkovLM(VOCAB, seed=4))):
            for schedule in ("ar", "linear", "quadratic", "packed"):
                for stops in ([[4]], [[5, 6], [6, 1]], [[1, 2, 3]]):
                    res = decode(model, [1, 4, 6, 2], schedule=schedule, width=4, max_new_tokens=24,
                                 stop_sequences=stops)
                    _result(rec, f"{name}/{schedule}/{stops}", res)


def separate_drafters(rec: Recorder) -> None:
    """DEER's diffusion drafter and an AR drafter (random networks; exact ones on a toy)."""
    from ..drafters import ARDrafter, DiffusionDrafter, ExactARDrafter, ExactDiffusionDrafter
    from ..models import DualModeLM
    from ..toy import MarkovLM

    with watching(rec):
        target = DualModeLM(tiny_lm("qwen3", seed=5), MASK_ID)
        for name, drafter in (("diffusion", DiffusionDrafter(tiny_lm("qwen3", seed=6, layers=1), MASK_ID, SEP_ID,
                                                             context=6)),
                              ("ar", ARDrafter(tiny_lm("llama", seed=7, layers=1)))):
            _decodes(rec, target, name, ("deer" if name == "diffusion" else "ar_draft",), (2, 4), drafter=drafter)
        toy = MarkovLM(VOCAB, seed=8, eos_token_id=EOS_ID)
        _decodes(rec, toy, "exact-diffusion", ("deer",), (3,), drafter=ExactDiffusionDrafter(MarkovLM(VOCAB, seed=9)))
        _decodes(rec, toy, "exact-ar", ("ar_draft",), (3,), drafter=ExactARDrafter(MarkovLM(VOCAB, seed=9)))


def _feature_setup(seed: int = 10):
    from ..drafters.feature_block import build_feature_block_drafter
    from ..drafters.feature_target import FeatureTarget

    hf = tiny_lm("qwen3", seed=seed)
    network = build_feature_block_drafter(hf.config, num_layers=1, n_features=2, block_size=5, mask_token_id=MASK_ID,
                                          seed=seed + 1).double()
    return hf, network, FeatureTarget(hf, MASK_ID, list(network.config.target_layer_ids))


def block_editing(rec: Recorder) -> None:
    """DFlash / DEdit block drafters (K passes, early exit, stochastic editing) and the Domino
    and DSpark heads (with the confidence cut), on a feature-recording target."""
    import torch

    from ..drafters.block_edit import BlockEditDrafter
    from ..drafters.domino import DominoConfig, DominoNetwork
    from ..drafters.dspark import DSparkConfig, DSparkNetwork
    from ..drafters.head_block import HeadBlockDrafter

    hf, network, target = _feature_setup()
    with watching(rec):
        for options in ({"passes": 1}, {"passes": 3}, {"passes": 3, "early_exit": True},
                        {"passes": 2, "stochastic": "sample"}):
            _decodes(rec, target, f"edit/{options}", ("deer",), (4,), drafter=BlockEditDrafter(target, network,
                                                                                               **options))
        base = {k: v for k, v in network.config.to_dict().items()
                if k not in ("model_type", "architectures", "transformers_version")}
        state = torch.random.get_rng_state()
        torch.manual_seed(12)
        try:
            domino = DominoNetwork(DominoConfig(gru_hidden=8, mlp_hidden=8, **base)).double().eval()
            dspark = DSparkNetwork(DSparkConfig(markov_rank=4, **base)).double().eval()
        finally:
            torch.random.set_rng_state(state)
        for name, drafter in (("domino", HeadBlockDrafter(target, domino)), ("dspark", HeadBlockDrafter(target, dspark)),
                              ("dspark-cut", HeadBlockDrafter(target, dspark, confidence_threshold=0.3))):
            _decodes(rec, target, name, ("deer",), (4,), drafter=drafter)


def feature_drafting(rec: Recorder) -> None:
    """Medusa (one pass of its heads), Hydra and EAGLE-3 (token by token), seed 001's
    feature-level baselines, on a feature-recording target."""
    import torch

    from ..drafters.feature_drafting import Eagle3Drafter, FeatureHeadDrafter
    from ..drafters.feature_heads import build_eagle3, build_feature_heads

    hf, _, target = _feature_setup(seed=20)
    networks = {kind: build_feature_heads(hf.config, kind, num_heads=4, seed=22).double() for kind in ("medusa", "hydra")}
    networks["eagle3"] = build_eagle3(hf.config, target.layer_ids, seed=23).double()
    state = torch.random.get_rng_state()
    torch.manual_seed(24)
    try:
        for network in networks.values():      # away from the zero start, so each head drafts its own tokens
            for p in network.parameters():
                p.data += 0.05 * torch.randn_like(p)
    finally:
        torch.random.set_rng_state(state)
    with watching(rec):
        for kind, network in networks.items():
            drafter = Eagle3Drafter(target, network) if kind == "eagle3" else FeatureHeadDrafter(target, network)
            _decodes(rec, target, kind, ("drafted" if drafter.kind == "diffusion" else "ar_draft",), (4,),
                     drafter=drafter)


def batching(rec: Recorder) -> None:
    """Several ragged prompts decoded together (AR and DEER), with and without EOS."""
    from ..decoding import decode_batch
    from ..drafters import DiffusionDrafter
    from ..models import DualModeLM

    target = DualModeLM(tiny_lm("qwen3", seed=13), MASK_ID)
    drafter = DiffusionDrafter(tiny_lm("qwen3", seed=14, layers=1), MASK_ID, SEP_ID, context=6)
    prompts = _prompts(3, seed=5)
    for schedule in ("ar", "deer"):
        for eos in (None, EOS_ID):
            results = decode_batch(target, prompts, schedule=schedule, width=3, max_new_tokens=12,
                                   drafter=drafter if schedule == "deer" else None, eos_token_id=eos)
            for i, res in enumerate(results):
                _result(rec, f"{schedule}/{eos}/{i}", res)
            rec.add(f"{schedule}/{eos}/cycles", results[0].extras["batch"]["cycles"])


def partial_branches(rec: Recorder) -> None:
    """The partial-branch schedule (seed 000, Sec. 5) under each branch policy."""
    from ..decoding import decode
    from ..models import DualModeLM

    model = DualModeLM(tiny_lm("qwen3", seed=15), MASK_ID)
    with watching(rec):
        for branches in ("full", "first:1", "likely:2"):
            for options in ({}, {"temperature": 1.0, "seed": 5}, {"eos_token_id": EOS_ID}):
                for i, prompt in enumerate(_prompts(2, seed=6)):
                    res = decode(model, prompt, schedule="partial", width=4, max_new_tokens=14, branches=branches,
                                 **options)
                    _result(rec, f"{branches}/{options}/{i}", res)
                    rec.add(f"{branches}/{options}/{i}/hits", res.extras.get("branch_hits"))
        res = decode(model, _prompts(1, seed=7)[0], schedule="partial", width=4, max_new_tokens=14,
                     branches="likely:2", temperature=1.0, seed=6, ablation="branch_argmax")
        _result(rec, "likely:2/branch_argmax", res)


def any_order(rec: Recorder) -> None:
    """Algorithm 3 (any-order verification) on a random transformers model and the exact toy:
    every schedule, left-to-right and confidence orders, the native threshold decoder, EOS and
    stop sequences; the per-iteration trace (order, kappa, h, A_t, next draft)."""
    import torch

    from ..anyorder_models import AnyOrderLM, ExactAnyOrderLM
    from ..decoding import decode

    models = {"neural": AnyOrderLM(tiny_lm("qwen3", seed=16), MASK_ID), "exact": ExactAnyOrderLM(8, 64, seed=1)}
    for name, model in models.items():
        for schedule in ("linear", "packed", "quadratic", "native"):
            for order in (("ltr",) if schedule == "native" else ("ltr", "confidence")):
                for options in ({}, {"eos_token_id": EOS_ID}, {"stop_sequences": [[4, 5]]}):
                    res = decode(model, torch.tensor([1, 5, 2]), schedule=schedule, width=4, max_new_tokens=14,
                                 order=order, trace=True, **options)
                    _result(rec, f"{name}/{schedule}/{order}/{options}", res)
                    rec.add(f"{name}/{schedule}/{order}/{options}/trace", _trace(res.extras.get("trace")))
        res = decode(model, torch.tensor([1, 5, 2]), schedule="native", width=4, max_new_tokens=14, order="ltr",
                     threshold=0.5, trace=True)
        _result(rec, f"{name}/native/threshold", res)
        for ablation in ("m_sees_own_o", "r_sees_o"):
            res = decode(model, torch.tensor([2, 6, 1]), schedule="packed", width=4, max_new_tokens=14,
                         order="confidence", ablation=ablation, trace=True)
            _result(rec, f"{name}/packed/{ablation}", res)
            rec.add(f"{name}/packed/{ablation}/trace", _trace(res.extras.get("trace")))


def _trace(trace):
    if trace is None:
        return None
    return [{k: v for k, v in step.items() if k not in ("seconds",)} if isinstance(step, dict) else step
            for step in trace]


def static_path(rec: Recorder) -> None:
    """The static-cache (compiled) path run eagerly: the target, DEER's and the AR drafter, and
    block editing on a static feature target."""
    from ..compiled import (StaticARDrafter, StaticBlockEditDrafter, StaticDiffusionDrafter, StaticDualModeLM,
                            StaticFeatureTarget)

    with watching(rec):
        target = StaticDualModeLM(tiny_lm("qwen3", seed=17), MASK_ID, max_cache_len=64)
        _decodes(rec, target, "static", ("ar", "linear", "quadratic", "packed"), (3,))
        _decodes(rec, target, "static-deer", ("deer",), (3,), drafter=StaticDiffusionDrafter(
            tiny_lm("qwen3", seed=18, layers=1), MASK_ID, SEP_ID, context=6, bucket=4))
        _decodes(rec, target, "static-ar", ("ar_draft",), (3,), drafter=StaticARDrafter(
            tiny_lm("qwen3", seed=19, layers=1), max_cache_len=64))
        hf, network, _ = _feature_setup(seed=20)
        feature_target = StaticFeatureTarget(hf, MASK_ID, list(network.config.target_layer_ids), max_cache_len=64)
        _decodes(rec, feature_target, "static-edit", ("deer",), (4,),
                 drafter=StaticBlockEditDrafter(feature_target, network, passes=2))


def proposal_lora(rec: Recorder) -> None:
    """A proposal-only LoRA adapter (seed 000, App. F.2) in both modes: the adapter reaches
    the proposal rows only."""
    import torch
    from peft import LoraConfig, get_peft_model

    from ..lora import ProposalLoRALM

    base = tiny_lm("qwen3", seed=21)
    state = torch.random.get_rng_state()
    torch.manual_seed(22)
    try:
        peft_model = get_peft_model(base, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"],
                                                     init_lora_weights=False)).eval()
    finally:
        torch.random.set_rng_state(state)
    with watching(rec):
        for mode in ("lean", "paper"):
            model = ProposalLoRALM(peft_model, MASK_ID, mode)
            _decodes(rec, model, mode, ("linear", "packed", "quadratic"), (3,))


@dataclass(frozen=True)
class Component:
    """One part of the battery: its name, the core modules whose behaviour it exercises (a
    notebook that imports any of them includes this component), and the function that runs it."""

    name: str
    modules: tuple[str, ...]
    run: Callable[[Recorder], None]


_SCHEDULE_MODULES = ("spec_lib.decoding", "spec_lib.schedules", "spec_lib.schedules.loops", "spec_lib.schedules.state",
                     "spec_lib.schedules.validation", "spec_lib.schedules.ablations", "spec_lib.models",
                     "spec_lib.architectures")

COMPONENTS: tuple[Component, ...] = (
    Component("masks", ("spec_lib.masks",), masks),          # the package: every layout module
    Component("verify", ("spec_lib.verify",), verification),
    Component("schedules", _SCHEDULE_MODULES, neural_schedules),
    Component("toy", ("spec_lib.toy", *_SCHEDULE_MODULES), toy_schedules),
    Component("stops", ("spec_lib.schedules.stops",), stop_sequences),
    Component("drafters", ("spec_lib.schedules.loops", "spec_lib.drafters", "spec_lib.drafters.base",
                           "spec_lib.drafters.diffusion", "spec_lib.drafters.autoregressive", "spec_lib.drafters.exact"),
              separate_drafters),
    Component("block_edit", ("spec_lib.drafters.block_edit", "spec_lib.drafters.feature_block",
                             "spec_lib.drafters.feature_target", "spec_lib.drafters.head_block",
                             "spec_lib.drafters.domino", "spec_lib.drafters.dspark"), block_editing),
    Component("feature_drafting", ("spec_lib.drafters.feature_drafting", "spec_lib.drafters.feature_heads"),
              feature_drafting),
    Component("batch", ("spec_lib.batch",), batching),
    Component("partial", ("spec_lib.schedules.partial", "spec_lib.schedules.branches"), partial_branches),
    Component("any_order", ("spec_lib.schedules.anyorder", "spec_lib.anyorder_models"), any_order),
    Component("static_path", ("spec_lib.compiled",), static_path),   # the package: target and drafters
    Component("lora", ("spec_lib.lora",), proposal_lora),
)
NAMES = tuple(c.name for c in COMPONENTS)
#: Component entries that stand for a whole package (its submodules, present and future).
PACKAGES = ("spec_lib.masks", "spec_lib.compiled")


def all_modules() -> list[str]:
    """Every module of the ``spec_lib`` package on disk (dotted names, sorted)."""
    from .. import provenance

    found = []
    for path in sorted(provenance.PACKAGE_DIR.rglob("*.py")):
        parts = path.relative_to(provenance.PACKAGE_DIR).with_suffix("").parts
        parts = parts[:-1] if parts[-1] == "__init__" else parts
        found.append(".".join((provenance.PACKAGE, *parts)))
    return found


def covers(entry: str, module: str) -> bool:
    """Whether a component's module entry names ``module`` (a package entry covers its submodules)."""
    return module == entry or (entry in PACKAGES and module.startswith(entry + "."))


def component_modules(component: Component) -> list[str]:
    """The modules on disk that ``component`` covers (a module split inside a covered package
    stays covered)."""
    return [m for m in all_modules() if any(covers(e, m) for e in component.modules)]


def covered_modules() -> tuple[str, ...]:
    """Every module the battery covers (sorted)."""
    return tuple(sorted({m for c in COMPONENTS for m in component_modules(c)}))


def compute(names=NAMES) -> dict[str, str]:
    """Run the battery of the named components (float64, one torch thread, fixed seeds) and
    return ``{component: hash}``."""
    import torch

    unknown = [n for n in names if n not in NAMES]
    if unknown:
        raise ValueError(f"components must be among {list(NAMES)}, got {unknown}")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    out = {}
    try:
        with torch.inference_mode():
            for component in COMPONENTS:
                if component.name in names:
                    rec = Recorder()
                    component.run(rec)
                    out[component.name] = rec.digest()
    finally:
        torch.set_num_threads(threads)
    return out


def cache_key() -> str:
    """What decides the fingerprint besides the battery's outcome: the syntax trees of this
    battery and of every module it imports (the covered ones among them), the Python version
    (syntax trees are dumped per version) and the torch / transformers / peft versions."""
    import platform
    from importlib.metadata import version

    from ..provenance import closure, source_hash

    return source_hash(closure([__name__, *covered_modules()]), platform.python_version(),
                       *(f"{name} {version(name)}" for name in ("torch", "transformers", "peft")))


def cache_dir() -> Path:
    from ..io import output_root

    return Path(os.environ.get("SPEC_LIB_FINGERPRINT_CACHE", output_root() / "runs" / "fingerprint"))


def _compute_fresh() -> dict[str, str]:
    """:func:`compute` in a new Python process, which imports the code as it is on disk now (a
    long-lived process may hold modules imported before an edit)."""
    import subprocess
    import sys

    from .. import provenance

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(provenance.PACKAGE_DIR.parent),
                                                        os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    code = "import json\nfrom spec_lib.notebook.fingerprint import compute\nprint(json.dumps(compute()))"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"the fingerprint battery failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def fingerprint() -> dict[str, str]:
    """``{component: hash}`` of the code on disk: read from the on-disk cache when the syntax
    trees of the code it covers and the library versions are unchanged, else computed in a new
    process (about 30 s on one core) and cached.

    Raises:
        RuntimeError: the battery failed, or the code changed while it ran.
    """
    from ..io import atomic_write_bytes

    key = cache_key()
    path = cache_dir() / f"{key}.json"
    if path.is_file():
        try:
            cached = json.loads(path.read_text())
        except ValueError:
            cached = {}
        if set(cached.get("components", {})) == set(NAMES):
            return cached["components"]
    started = time.perf_counter()
    components = _compute_fresh()
    if cache_key() != key:
        raise RuntimeError("the code changed while the fingerprint battery ran; run it again")
    atomic_write_bytes(path, json.dumps({"key": key, "components": components,
                                         "seconds": time.perf_counter() - started}, indent=1).encode())
    return components


def main(argv=None) -> int:
    """``python -m spec_lib.notebook.fingerprint [--fresh] [COMPONENT ...]``: print the fingerprint."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m spec_lib.notebook.fingerprint", description=main.__doc__)
    parser.add_argument("--fresh", action="store_true", help="run the battery even if a cached fingerprint exists")
    parser.add_argument("components", nargs="*", help=f"components to run (default: all): {list(NAMES)}")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    result = compute(args.components or NAMES) if (args.fresh or args.components) else fingerprint()
    print(json.dumps(result, indent=1))
    print(f"{time.perf_counter() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
