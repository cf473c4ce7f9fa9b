"""The one decoder: every schedule of the registry, every order and every drafter runs through
``spec_lib.decode`` and returns AR's greedy output, on an exact toy and on a random Qwen3 in
float64; ``spec_lib.decode_batch`` takes the same arguments and returns, per row, what ``decode``
returns for that prompt alone (tokens, NFE, acceptance); the one validator refuses a drafter on
another device before any work."""

from __future__ import annotations

import pytest
import torch

from spec_lib import decode, decode_batch
from spec_lib.anyorder_models import AnyOrderLM, ExactAnyOrderLM
from spec_lib.drafters import ARDrafter, DiffusionDrafter, ExactARDrafter, ExactDiffusionDrafter
from spec_lib.models import DualModeLM
from spec_lib.notebook.fingerprint import MASK_ID, SEP_ID, VOCAB, tiny_lm
from spec_lib.schedules import ALIASES, ALL_SCHEDULES, SCHEDULE_SPECS
from spec_lib.schedules.anyorder import serial_greedy
from spec_lib.toy import MarkovLM

PROMPTS = ([1, 5, 2], [4, 2, 6, 7, 1])
POLICIES = ("full", "first:2", "likely:2")


def _models():
    """(label, target, {drafter kind: drafter}) on the toy and on random float64 transformers."""
    toy = MarkovLM(VOCAB, seed=3)
    neural = DualModeLM(tiny_lm("qwen3", seed=2), MASK_ID)
    return [("toy", toy, {"diffusion": ExactDiffusionDrafter(MarkovLM(VOCAB, seed=9)),
                          "ar": ExactARDrafter(MarkovLM(VOCAB, seed=9))}),
            ("qwen3", neural, {"diffusion": DiffusionDrafter(tiny_lm("qwen3", seed=6, layers=1), MASK_ID, SEP_ID,
                                                             context=8),
                               "ar": ARDrafter(tiny_lm("qwen3", seed=7, layers=1))})]


def _left_to_right_runs():
    """Every left-to-right schedule (aliases included) with the options it takes."""
    for name in ALL_SCHEDULES:
        spec = SCHEDULE_SPECS[ALIASES.get(name, name)]
        if spec.run is None:
            continue
        for branches in (POLICIES if "branches" in spec.options else (None,)):
            yield name, spec, branches


def test_the_registry_is_what_decode_accepts():
    assert set(ALL_SCHEDULES) == {"ar", "linear", "quadratic", "packed", "partial", "drafted", "ar_draft", "native",
                                  "deer"}
    with pytest.raises(ValueError, match=r"schedule must be one of \['ar', 'linear'.*'deer'\]"):
        decode(MarkovLM(VOCAB, seed=3), [1, 2], schedule="Packed", width=3, max_new_tokens=4)


@pytest.mark.parametrize("label, target, drafters", _models(), ids=["toy", "qwen3"])
def test_every_left_to_right_schedule_returns_ar_greedy(label, target, drafters):
    """Greedy outputs of every schedule, drafter and branch policy equal AR's, with and without
    EOS and a stop sequence (each run's options as decode takes them)."""
    checked = set()
    for prompt in PROMPTS:
        reference = decode(target, prompt, schedule="ar", width=1, max_new_tokens=16)
        marker = reference.tokens[6:8]
        for name, spec, branches in _left_to_right_runs():
            options = {"branches": branches} if branches else {}
            if spec.drafter:
                options["drafter"] = drafters[spec.drafter]
            for width in (1, 4):
                res = decode(target, prompt, schedule=name, width=width, max_new_tokens=16, **options)
                assert res.tokens == reference.tokens, (label, name, branches, width)
                stopped = decode(target, prompt, schedule=name, width=width, max_new_tokens=16,
                                 stop_sequences=[marker], **options)
                assert stopped.tokens == reference.tokens[: len(stopped.tokens)] and \
                    stopped.tokens[-2:] == marker, (label, name, branches, width)
            checked.add(name)
    assert checked == {n for n in ALL_SCHEDULES if SCHEDULE_SPECS[ALIASES.get(n, n)].run is not None}


def test_the_deer_alias_is_drafted():
    target, drafter = MarkovLM(VOCAB, seed=3), ExactDiffusionDrafter(MarkovLM(VOCAB, seed=9))
    for temperature in (0.0, 1.0):
        runs = [decode(target, [1, 5, 2], schedule=name, width=3, max_new_tokens=20, drafter=drafter,
                       temperature=temperature, seed=4) for name in ("drafted", "deer")]
        assert (runs[0].tokens, runs[0].nfe, runs[0].accepted) == (runs[1].tokens, runs[1].nfe, runs[1].accepted)


@pytest.mark.parametrize("model", [ExactAnyOrderLM(8, 64, seed=1), AnyOrderLM(tiny_lm("qwen3", seed=16), MASK_ID)],
                         ids=["exact", "qwen3"])
def test_every_any_order_schedule_runs_and_the_speculative_ones_return_the_serial_greedy_decode(model):
    """Every any-order schedule of the registry runs through decode; under ``order="ltr"`` the
    speculative ones equal the model's serial greedy decode (Proposition C.1).  SetDLM's
    ``native`` decoder commits the most confident position each call, so it is its own decoder
    (not lossless): it fills the output and resolves at least one position per call."""
    any_order = [n for n, s in SCHEDULE_SPECS.items() if s.any_order]
    assert any_order == ["linear", "quadratic", "packed", "native"]
    for prompt in PROMPTS:
        reference = serial_greedy(model, torch.tensor(prompt), max_new_tokens=12)
        for name in any_order:
            res = decode(model, prompt, schedule=name, width=4, max_new_tokens=12, order="ltr")
            if name == "native":
                assert len(res.tokens) == 12 and res.nfe <= 13 and sum(res.accepted) == 12, res
            else:
                assert res.tokens == reference, (name, prompt)


def test_decode_batch_returns_per_row_what_decode_returns():
    """Same arguments, same result type per row, same tokens, NFE and acceptance (the prompt is
    processed in the first call, as decode's first call does), for AR and the drafter, with EOS."""
    target = DualModeLM(tiny_lm("qwen3", seed=13), MASK_ID)
    drafter = DiffusionDrafter(tiny_lm("qwen3", seed=14, layers=1), MASK_ID, SEP_ID, context=6)
    prompts = [[1, 4], [2, 7, 5, 9, 1], [6]]
    for name in ("ar", "drafted", "deer"):
        for eos in (None, 3):
            options = {"drafter": drafter} if name != "ar" else {}
            rows = decode_batch(target, prompts, schedule=name, width=3, max_new_tokens=12, eos_token_id=eos,
                                **options)
            assert len(rows) == len(prompts) and rows[0].extras["batch"]["batch"] == len(prompts)
            for prompt, row in zip(prompts, rows):
                alone = decode(target, prompt, schedule=name, width=3, max_new_tokens=12, eos_token_id=eos,
                               **options)
                assert (row.tokens, row.nfe, row.accepted) == (alone.tokens, alone.nfe, alone.accepted), \
                    (name, eos, prompt)


def test_decode_batch_without_a_kv_cache_reruns_the_prefix_and_returns_the_same_decode():
    """Seed 001's Table 5 setting: with ``kv_cache=False`` every call feeds each sequence's whole
    verified prefix again (the calls grow with the output; with the cache, later calls feed k + 1
    rows), and tokens, NFE and acceptance are the cached decode's, for AR and the drafter, with EOS."""
    target = DualModeLM(tiny_lm("qwen3", seed=13), MASK_ID)
    drafter = DiffusionDrafter(tiny_lm("qwen3", seed=14, layers=1), MASK_ID, SEP_ID, context=6)
    prompts = [[1, 4], [2, 7, 5, 9, 1], [6]]
    forward, rows = target.hf_model.forward, []

    def counting(*args, **kwargs):
        rows.append(kwargs["input_ids"].shape[1])
        return forward(*args, **kwargs)

    target.hf_model.forward = counting
    try:
        for name in ("ar", "drafted"):
            for eos in (None, 3):
                options = {"drafter": drafter} if name != "ar" else {}
                rows.clear()
                cached = decode_batch(target, prompts, schedule=name, width=3, max_new_tokens=12, eos_token_id=eos,
                                      **options)
                cached_rows = list(rows)
                rows.clear()
                uncached = decode_batch(target, prompts, schedule=name, width=3, max_new_tokens=12,
                                        eos_token_id=eos, kv_cache=False, **options)
                assert [(r.tokens, r.nfe, r.accepted) for r in uncached] == \
                       [(r.tokens, r.nfe, r.accepted) for r in cached], (name, eos)
                width = 4 if name != "ar" else 1
                assert max(cached_rows[1:]) == width                        # the cache: k + 1 new rows a call
                assert rows[-1] > width + 4 and rows == sorted(rows)       # no cache: the prefix every call
    finally:
        target.hf_model.forward = forward
    with pytest.raises(ValueError, match="kv_cache must be True or False"):
        decode_batch(target, prompts, schedule="ar", width=1, max_new_tokens=4, kv_cache="no")


def test_decode_batch_refuses_what_it_does_not_run():
    target = DualModeLM(tiny_lm("qwen3", seed=13), MASK_ID)
    cases = [(dict(schedule="packed"), "decode_batch runs the schedules"),
             (dict(schedule="ar", temperature=1.0), "decode_batch is greedy"),
             (dict(schedule="ar", stop_sequences=[[1]]), "decode_batch is greedy"),
             (dict(schedule="ar", order="ltr"), r"takes \['order'\] only at their defaults"),
             (dict(schedule="ar", branches="full", trace=True), r"\['branches', 'trace'\]")]
    for options, message in cases:
        with pytest.raises(ValueError, match=message):
            decode_batch(target, [[1, 2]], width=3, max_new_tokens=4, **options)


class _Elsewhere(ExactDiffusionDrafter):
    """An exact drafter that reports another device than the target's (as a drafter moved to a
    GPU would while the target stays on the CPU)."""

    def __init__(self, toy) -> None:
        super().__init__(toy)
        self.device = torch.device("meta")


def test_a_drafter_on_another_device_is_refused_before_any_call():
    target = MarkovLM(VOCAB, seed=3)
    drafter = _Elsewhere(MarkovLM(VOCAB, seed=9))
    drafter.draft = lambda *a, **k: pytest.fail("the drafter was called")      # nothing runs
    for name in ("drafted", "deer"):
        with pytest.raises(ValueError, match=r"drafter is on meta and the target on cpu"):
            decode(target, [1, 2], schedule=name, width=3, max_new_tokens=4, drafter=drafter)
    neural = DualModeLM(tiny_lm("qwen3", seed=13), MASK_ID)
    elsewhere = ARDrafter(tiny_lm("qwen3", seed=7, layers=1).to("meta"))
    with pytest.raises(ValueError, match=r"drafter is on meta and the target on cpu"):
        decode(neural, [1, 2], schedule="ar_draft", width=3, max_new_tokens=4, drafter=elsewhere)
    with pytest.raises(ValueError, match=r"drafter is on meta"):
        decode_batch(neural, [[1, 2]], schedule="deer", width=3, max_new_tokens=4,
                     drafter=DiffusionDrafter(tiny_lm("qwen3", seed=14, layers=1).to("meta"), MASK_ID, SEP_ID))


@pytest.mark.parametrize("options, message", [
    (dict(schedule="packed", branches="full"), "branches applies to schedule 'partial' only"),
    (dict(schedule="native"), "runs only under order="),
    (dict(schedule="packed", threshold=0.5), "threshold applies to schedule 'native' only"),
    (dict(schedule="packed", trace=True), "trace applies to any-order decoding only"),
    (dict(schedule="packed", ablation="branch_argmax"), "ablation must be one of"),
    (dict(schedule="partial", ablation="fresh_q"), "ablation must be one of"),
    (dict(schedule="packed", order="ltr"), "needs a model with an any-order mode"),
])
def test_options_of_another_schedule_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        decode(MarkovLM(VOCAB, seed=3), [1, 2], width=3, max_new_tokens=4, **options)


@pytest.mark.parametrize("options, message", [
    (dict(schedule="ar"), "does not run under order="),
    (dict(schedule="packed", temperature=1.0), "any-order decoding is greedy"),
    (dict(schedule="packed", ablation="fresh_q"), "ablation must be one of"),
    (dict(schedule="native", ablation="r_sees_o"), "ablation must be one of"),
    (dict(schedule="native", threshold=1.5), "threshold must be in"),
])
def test_any_order_options_are_checked(options, message):
    with pytest.raises(ValueError, match=message):
        decode(ExactAnyOrderLM(8, 64, seed=1), [1, 2], width=3, max_new_tokens=4, **options)


def test_every_drafter_implements_the_one_protocol():
    """Every drafter of ``spec_lib.drafters`` and of the compiled path is a ``Drafter``; the
    block drafters' ``draft_logits`` all return a ``DraftLogits`` (one entry of seconds and rows
    per pass); an object without ``draft`` is not a drafter (negative control)."""
    from spec_lib.compiled.drafters import StaticARDrafter, StaticBlockEditDrafter, StaticDiffusionDrafter
    from spec_lib.drafters import (BlockDrafter, BlockEditDrafter, DraftLogits, Drafter, Eagle3Drafter,
                                   FeatureHeadDrafter, HeadBlockDrafter)
    from spec_lib.drafters.domino import DominoConfig, DominoNetwork
    from spec_lib.drafters.feature_heads import build_eagle3, build_feature_heads
    from spec_lib.notebook.fingerprint import _feature_setup

    _, network, target = _feature_setup()
    base = {k: v for k, v in network.config.to_dict().items()
            if k not in ("model_type", "architectures", "transformers_version")}
    domino = DominoNetwork(DominoConfig(gru_hidden=8, mlp_hidden=8, **base)).double().eval()
    block = [DiffusionDrafter(tiny_lm("qwen3", seed=6, layers=1), MASK_ID, SEP_ID, context=8),
             StaticDiffusionDrafter(tiny_lm("qwen3", seed=6, layers=1), MASK_ID, SEP_ID, context=8),
             BlockEditDrafter(target, network, passes=3), StaticBlockEditDrafter(target, network, passes=3),
             HeadBlockDrafter(target, domino), FeatureHeadDrafter(target, build_feature_heads(
                 target.config, "medusa", num_heads=4).double()), ExactDiffusionDrafter(MarkovLM(VOCAB, seed=9))]
    serial = [ARDrafter(tiny_lm("qwen3", seed=7, layers=1)), StaticARDrafter(tiny_lm("qwen3", seed=7, layers=1)),
              ExactARDrafter(MarkovLM(VOCAB, seed=9)),
              FeatureHeadDrafter(target, build_feature_heads(target.config, "hydra", num_heads=4).double()),
              Eagle3Drafter(target, build_eagle3(target.config, target.layer_ids).double())]
    for drafter in block + serial:
        assert isinstance(drafter, Drafter), type(drafter).__name__
    prefix = torch.tensor([1, 5, 2])
    for drafter in block[:6]:
        assert isinstance(drafter, BlockDrafter), type(drafter).__name__
        drafter.reset()
        round_ = drafter.draft_logits(prefix, 3)
        assert isinstance(round_, DraftLogits) and round_.logits.shape == (3, VOCAB), type(drafter).__name__
        assert len(round_.seconds) == len(round_.rows) >= 1, type(drafter).__name__
    assert not isinstance(object(), Drafter) and not isinstance(serial[0], BlockDrafter)


def test_the_readme_decoding_snippet_runs_as_written():
    """README, *Decoding in five lines*: the first code block of that section runs unchanged
    and its toy decode returns AR's greedy tokens (the snippet's greedy call is a Packed-SS
    decode of an exact toy)."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme.split("## Decoding in five lines", 1)
    assert len(section) == 2, "the README lost its 'Decoding in five lines' section"
    block = re.search(r"```python\n(.*?)```", section[1], flags=re.S)
    assert block, "no python block in the section"
    scope: dict = {}
    exec(compile(block.group(1), "README.md", "exec"), scope)
    toy, res = scope["toy"], scope["res"]
    packed = decode(toy, [0, 1, 2], schedule="packed", width=4, max_new_tokens=32)
    assert packed.tokens == decode(toy, [0, 1, 2], schedule="ar", width=1, max_new_tokens=32).tokens
    assert len(res.tokens) == 32 and res.nfe >= 1
