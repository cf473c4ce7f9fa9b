"""Proposal-only LoRA (seed 000, App. F.2; spec_lib.lora): verifier rows are bitwise the base
model's, greedy outputs of every schedule equal the base model's AR output in both adapter
modes, Table 5's selected / evaluated rows come from the layout, a checkpoint plus an adapter
on disk loads (``load_dual_mode(path, adapter_path=...)``, the one loader: the model peft builds
over it, in float64 and over a bfloat16 checkpoint, and as notebook 17's models), and bad input,
an adapter for another base model included, is refused before the checkpoint is read."""

from __future__ import annotations

import copy
import json
import shutil
import warnings

import pytest
import torch

from spec_lib import decode
from spec_lib.architectures import build_qwen3
from spec_lib.lora import MODES, ProposalAdapter, ProposalLoRALM, adapter_rows
from spec_lib.models import DualModeLM
from spec_lib.studies import proposal_lora as study
from spec_lib.training.checkpoints import load_dual_mode, load_model
from spec_lib.training.lora_models import load_proposal_lora

from .conftest import MASK_ID, VOCAB, prompts

SCHEDULES = (("linear", 4), ("packed", 4), ("quadratic", 3))


def peft_copy(hf_model, seed: int = 0):
    """A float64 copy of ``hf_model`` with a randomly initialised (non-zero) o_proj adapter."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return get_peft_model(copy.deepcopy(hf_model).to(torch.float64),
                              LoraConfig(r=4, lora_alpha=8, target_modules=["o_proj"], init_lora_weights=False))


def with_adapter(hf_model, mode: str, seed: int = 0):
    return ProposalLoRALM(peft_copy(hf_model, seed), MASK_ID, mode)


@pytest.fixture(scope="module")
def lora_models(trained_hf_model):
    """The base model and both adapter modes over one set of weights (as load_lora_preset builds
    them: copies of a model can differ in the last bit on CPU, with the memory layout)."""
    peft_model = peft_copy(trained_hf_model)
    adapted = {mode: ProposalLoRALM(peft_model, MASK_ID, mode) for mode in ("paper", "lean")}
    return DualModeLM(peft_model.get_base_model(), MASK_ID), adapted


def test_verifier_rows_are_bitwise_the_base_models(lora_models, trained_hf_model):
    base, adapted = lora_models
    prefix = prompts(1, seed=3, chain=trained_hf_model.chain)[0]
    draft = torch.tensor([3, 5, 7])
    for kind in ("verify", "linear_draft", "packed", "quadratic"):
        outs = []
        for model in (base, *adapted.values()):
            model.reset()
            model.call(kind, prefix, draft[:0], 4)                       # the prompt
            model.commit(1)
            outs.append(model.call(kind, torch.cat([prefix, draft[:1]]), draft[1:], 4))
            model.commit(1)
        ref, paper, lean = outs
        if ref.target_logits is not None:
            assert torch.equal(paper.target_logits, ref.target_logits) and torch.equal(lean.target_logits, ref.target_logits)
        if ref.draft_logits is not None:                                 # the adapter changes proposals,
            assert not torch.equal(paper.draft_logits, ref.draft_logits)  # the same way in both modes
            torch.testing.assert_close(paper.draft_logits, lean.draft_logits, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("rows", [[5, 6, 7], [1, 4, 6], [], [0, 1, 2, 3, 4, 5, 6, 7]])
def test_lean_matches_paper_for_any_row_set(trained_hf_model, rows):
    """The lean hook (in place on a contiguous slice; gather + index_add otherwise) gives the
    paper variant's logits; rows before the first chosen row are untouched."""
    peft_model = peft_copy(trained_hf_model)
    adapter = ProposalAdapter(peft_model, "paper")
    ids = torch.arange(1, 9)[None]
    proposal = torch.zeros(8, dtype=torch.bool)
    proposal[rows] = True
    with torch.no_grad():
        base = peft_model.get_base_model()(input_ids=ids).logits
        with adapter.applied_to(proposal):
            paper = peft_model.get_base_model()(input_ids=ids).logits
        adapter.mode = "lean"
        with adapter.applied_to(proposal):
            lean = peft_model.get_base_model()(input_ids=ids).logits
    torch.testing.assert_close(lean, paper, rtol=1e-9, atol=1e-9)
    first = rows[0] if rows else 8                                       # (later rows attend to changed ones)
    assert torch.equal(lean[0, :first], base[0, :first])
    if rows:                                                             # the update reached the rows
        assert not torch.equal(lean[0, first], base[0, first])


def test_a_dora_adapter_is_refused(trained_hf_model):
    from peft import LoraConfig, get_peft_model

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dora = get_peft_model(copy.deepcopy(trained_hf_model).to(torch.float64),
                              LoraConfig(r=2, target_modules=["o_proj"], use_dora=True))
    with pytest.raises(ValueError, match="DoRA"):
        ProposalAdapter(dora, "lean")


def test_negative_control_an_ungated_adapter_changes_the_verifier(trained_hf_model):
    """peft's own forward (the update on every row) would change p_target: the gate is what
    keeps the verifier exact, and the bitwise test above can fail."""
    model = with_adapter(trained_hf_model, "lean")
    prefix = torch.tensor([1, 2, 3, 4])
    gated = model.call("packed", prefix, prefix[:0], 4).target_logits
    model.adapter.remove()                                               # peft applies it everywhere
    model.reset()
    ungated = model.call("packed", prefix, prefix[:0], 4).target_logits
    assert not torch.equal(gated, ungated)


def test_greedy_outputs_equal_the_base_models_ar_output(lora_models, trained_hf_model):
    base, adapted = lora_models
    multi = 0
    for prompt in prompts(4, seed=8, chain=trained_hf_model.chain):
        expected = decode(base, prompt, schedule="ar", width=1, max_new_tokens=20).tokens
        for model in adapted.values():
            for schedule, width in SCHEDULES:
                res = decode(model, prompt, schedule=schedule, width=width, max_new_tokens=20)
                assert res.tokens == expected, (model.mode, schedule)
                multi += sum(a > 1 for a in res.accepted)
    assert multi > 0


@pytest.mark.parametrize("block", [4, 8, 32])
def test_table5_selected_and_evaluated_rows(block):
    width = block - 1
    assert adapter_rows("packed", width, width, "paper") == {"rows": 2 * block, "selected": block, "evaluated": 2 * block}
    assert adapter_rows("packed", width, width, "lean") == {"rows": 2 * block, "selected": block, "evaluated": block}
    assert adapter_rows("quadratic", width, width, "paper") == {"rows": block * (block + 1), "selected": block * block,
                                                                "evaluated": block * (block + 1)}
    assert adapter_rows("linear_draft", 0, width, "paper") == {"rows": block, "selected": block, "evaluated": block}
    assert adapter_rows("verify", width, width, "paper") == {"rows": block, "selected": 0, "evaluated": 0}


def test_a_checkpoint_and_an_adapter_on_disk(tmp_path, trained_hf_model):
    from peft import LoraConfig, get_peft_model

    base_dir, adapter_dir = tmp_path / "base", tmp_path / "adapter"
    base = copy.deepcopy(trained_hf_model)
    base.config.mask_token_id = MASK_ID
    base.save_pretrained(base_dir)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        peft_model = get_peft_model(copy.deepcopy(base), LoraConfig(r=4, lora_alpha=8, target_modules=["o_proj"],
                                                                    init_lora_weights=False))
    peft_model.save_pretrained(adapter_dir)
    model, _ = load_proposal_lora(base_dir, adapter_dir, mode="paper")
    reference = DualModeLM(model.hf_model, MASK_ID)                      # its weights, adapter inactive
    prompt = torch.tensor([1, 2, 3, 4, 5])
    expected = decode(reference, prompt, schedule="ar", width=1, max_new_tokens=12).tokens
    assert decode(model, prompt, schedule="packed", width=4, max_new_tokens=12).tokens == expected
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        load_proposal_lora(base_dir, tmp_path, mode="lean")
    with pytest.raises(ValueError, match="mode must be one of"):
        load_proposal_lora(base_dir, adapter_dir, mode="fast")


def test_bad_input(trained_hf_model):
    with pytest.raises(ValueError, match="mode must be one of"):
        with_adapter(trained_hf_model, "everywhere")
    with pytest.raises(ValueError, match="no LoRA layer"):
        ProposalAdapter(torch.nn.Linear(2, 2), "lean")
    with pytest.raises(ValueError, match="mode must be one of"):
        adapter_rows("packed", 3, 3, "both")


# ----- a checkpoint plus an adapter on disk: load_dual_mode(path, adapter_path=...) ------------------

def save_adapter(hf_model, path, seed: int = 0, target_modules=("o_proj",)):
    """A randomly initialised (non-zero) LoRA adapter of ``hf_model`` saved by peft's save_pretrained."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    with warnings.catch_warnings():                 # peft's notes on transformers and on embedding adapters
        warnings.simplefilter("ignore")
        peft_model = get_peft_model(copy.deepcopy(hf_model), LoraConfig(r=4, lora_alpha=8, init_lora_weights=False,
                                                                        target_modules=list(target_modules)))
        peft_model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def on_disk(tmp_path_factory):
    """A tiny Qwen3 checkpoint (MASK id in its config) and an o_proj adapter for it, saved with
    save_pretrained (seconds: the weights are random)."""
    root = tmp_path_factory.mktemp("lora_on_disk")
    base = build_qwen3(VOCAB, hidden_size=32, num_layers=2, num_heads=4, max_positions=128, seed=1)
    base.config.mask_token_id = MASK_ID
    base.save_pretrained(root / "base")
    return root / "base", save_adapter(base, root / "adapter")


def peft_reference(base_dir, adapter_dir, mode: str) -> ProposalLoRALM:
    """What load_proposal_lora built before load_dual_mode took adapter_path: the checkpoint read by
    load_dual_mode, wrapped by peft directly."""
    from peft import PeftModel

    dual, _ = load_dual_mode(base_dir, dtype="float64")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        peft_model = PeftModel.from_pretrained(dual.hf_model, adapter_dir, is_trainable=False)
    return ProposalLoRALM(peft_model, dual.mask_token_id, mode)


def first_call(model, kind: str = "packed"):
    model.reset()
    return model.call(kind, torch.tensor([1, 2, 3, 4, 5]), torch.tensor([], dtype=torch.long), 4)


@pytest.mark.parametrize("mode", MODES)
def test_load_dual_mode_with_an_adapter_is_the_proposal_lora_model(on_disk, mode):
    """One loader, three ways in: load_dual_mode(adapter_path=), load_proposal_lora and load_model
    give the model peft builds over the checkpoint (same draft and verify logits, same greedy
    decode), and the adapter is live (the drafts differ from the adapter-free checkpoint's)."""
    base_dir, adapter_dir = on_disk
    reference = peft_reference(base_dir, adapter_dir, mode)
    plain = DualModeLM(reference.hf_model, MASK_ID)                     # the same weights, adapter inactive
    loaded = {"load_dual_mode": load_dual_mode(base_dir, adapter_path=adapter_dir, adapter_mode=mode,
                                               dtype="float64")[0],
              "load_proposal_lora": load_proposal_lora(base_dir, adapter_dir, mode=mode, dtype="float64")[0],
              "load_model": load_model("", str(base_dir), adapter_path=str(adapter_dir), adapter_mode=mode,
                                       dtype="float64")[0]}
    expected = {kind: first_call(reference, kind) for kind in ("linear_draft", "packed")}
    assert not torch.equal(expected["packed"].draft_logits, first_call(plain).draft_logits)
    prompt = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6])
    ar = decode(plain, prompt, schedule="ar", width=1, max_new_tokens=16).tokens
    assert decode(reference, prompt, schedule="linear", width=3, max_new_tokens=16).tokens == ar
    for name, model in loaded.items():
        assert type(model) is ProposalLoRALM and model.mode == mode and model.mask_token_id == MASK_ID, name
        for kind, ref in expected.items():                               # separately loaded copies: to 1e-12
            out = first_call(model, kind)
            torch.testing.assert_close(out.draft_logits, ref.draft_logits, rtol=0, atol=1e-12, msg=name)
            if ref.target_logits is not None:
                torch.testing.assert_close(out.target_logits, ref.target_logits, rtol=0, atol=1e-12, msg=name)
        assert decode(model, prompt, schedule="linear", width=3, max_new_tokens=16).tokens == ar, name
        assert decode(model, prompt, schedule="packed", width=3, max_new_tokens=16).tokens == ar, name


def test_a_bfloat16_checkpoint_takes_its_float32_adapter(on_disk):
    """peft keeps the adapter in float32 over a bfloat16 checkpoint (the gpu profile's dtype): the
    update is computed in float32 and added in bfloat16; verify rows stay the checkpoint's, bitwise."""
    base_dir, adapter_dir = on_disk
    for mode in MODES:
        model, _ = load_dual_mode(base_dir, adapter_path=adapter_dir, adapter_mode=mode, dtype="bfloat16")
        plain = DualModeLM(model.hf_model, MASK_ID)
        out, ref = first_call(model), first_call(plain)
        assert out.draft_logits.dtype == torch.bfloat16 and torch.equal(out.target_logits, ref.target_logits), mode
        assert not torch.equal(out.draft_logits, ref.draft_logits), mode
        assert len(decode(model, [1, 2, 3], schedule="packed", width=3, max_new_tokens=8).tokens) == 8


def test_notebook_17_takes_a_checkpoint_and_an_adapter(on_disk):
    """study.load_models with checkpoint_path + adapter_path (the gpu params' keys): the three LoRA
    models over one set of weights, the checkpoint without its adapter as the dual-mode model, no
    training record, nothing of training to check, the MASK id from the config unless given;
    either path alone is refused."""
    base_dir, adapter_dir = on_disk
    dual, lora, _, trained = study.load_models("smoke", "smoke", str(base_dir), str(adapter_dir),
                                               dtype="float64")
    assert trained is None and dual is lora["base"] and list(lora) == ["base", *MODES]
    assert [lora[mode].mode for mode in MODES] == list(MODES)
    assert lora["paper"].hf_model is lora["lean"].hf_model is dual.hf_model
    assert study.verifier_bitwise({mode: lora[mode] for mode in MODES}, dual, [[1, 2, 3, 4, 5, 6, 7]], 3) == \
        {"paper": True, "lean": True}
    assert study.sources("smoke", "smoke", trained) == {"checkpoint_key": None, "lora_key": None, "record": None}
    assert study.training_summary(trained) == {"trained_here": False}
    assert study.losses_decreased(trained) == {} and study.training_checks(trained, 10.0) == {}
    for checkpoint, adapter in ((str(base_dir), ""), ("", str(adapter_dir))):
        with pytest.raises(ValueError, match="checkpoint_path and adapter_path go together"):
            study.load_models("smoke", "smoke", checkpoint, adapter)


def _edited_adapter(adapter_dir, path, config=None, keys=None, weights=True):
    """A copy of ``adapter_dir`` with its config updated, its weight names renamed, or no weights."""
    from safetensors.torch import load_file, save_file

    path.mkdir()
    cfg = json.loads((adapter_dir / "adapter_config.json").read_text())
    (path / "adapter_config.json").write_text(json.dumps({**cfg, **(config or {})}))
    if weights:
        tensors = load_file(adapter_dir / "adapter_model.safetensors")
        save_file({(keys(k) if keys else k): v for k, v in tensors.items()}, path / "adapter_model.safetensors")
    return path


def test_bad_adapters_are_refused_before_the_checkpoint_is_read(on_disk, tmp_path, monkeypatch):
    import transformers

    base_dir, adapter_dir = on_disk

    def never(*args, **kwargs):
        raise AssertionError("the checkpoint was read")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", never)
    (tmp_path / "empty").mkdir()
    refused = [
        ({"adapter_path": adapter_dir, "adapter_mode": "fast"}, ValueError,
         r"adapter_mode must be one of \['paper', 'lean'\], got 'fast'"),
        ({"adapter_path": tmp_path / "nowhere"}, FileNotFoundError, r"adapter_path '.*nowhere' is not a directory"),
        ({"adapter_path": adapter_dir / "adapter_config.json"}, FileNotFoundError, "is not a directory"),
        ({"adapter_path": tmp_path / "empty"}, FileNotFoundError,
         "adapter_path '.*empty' holds no adapter_config.json"),
        ({"adapter_path": ""}, ValueError, "adapter_path is empty: .* or None for no adapter"),
        ({"adapter_path": 3}, TypeError, r"adapter_path must be a local adapter directory \(str or Path\) or None"),
        ({"adapter_path": _edited_adapter(adapter_dir, tmp_path / "ia3", {"peft_type": "IA3"})}, ValueError,
         r"peft_type 'IA3' adapter; a proposal-only adapter is plain LoRA \(peft_type 'LORA'\)"),
        ({"adapter_path": _edited_adapter(adapter_dir, tmp_path / "dora", {"use_dora": True})}, ValueError, "DoRA"),
        ({"adapter_path": _edited_adapter(adapter_dir, tmp_path / "saved", {"modules_to_save": ["lm_head"]})},
         ValueError, "modules_to_save .* the verifier's included"),
        ({"adapter_path": _edited_adapter(adapter_dir, tmp_path / "bare", weights=False)}, FileNotFoundError,
         r"no weights: expected one of \['adapter_model.safetensors', 'adapter_model.bin'\]"),
        ({"adapter_path": _edited_adapter(adapter_dir, tmp_path / "other",
                                          keys=lambda k: k.replace("o_proj", "out_proj"))}, ValueError,
         r"does not fit checkpoint_path .*: it adapts \['out_proj'\] layers .* another base model"),
    ]
    for kwargs, error, match in refused:
        with pytest.raises(error, match=match):
            load_dual_mode(base_dir, **kwargs)
    with pytest.raises(ValueError, match="mode must be one of"):
        load_proposal_lora(base_dir, adapter_dir, mode="fast")
    with pytest.raises(ValueError, match="adapter_path needs checkpoint_path"):
        load_model("smoke", adapter_path=str(adapter_dir))


def test_an_adapter_for_another_base_or_other_layers_is_refused(on_disk, tmp_path):
    """Shapes are read from the adapter's weights and checked against the loaded checkpoint
    before peft touches it; an adapter of an embedding layer (not a linear one) is refused."""
    base_dir, _ = on_disk
    wider = build_qwen3(VOCAB, hidden_size=64, num_layers=2, num_heads=4, max_positions=128, seed=1)
    adapter = save_adapter(wider, tmp_path / "wider")
    with pytest.raises(ValueError, match=r"does not fit checkpoint_path .*: model.layers.0.self_attn.o_proj maps "
                                         r"32 -> 32 features, the adapter 64 -> 64 \(and 1 more\)"):
        load_dual_mode(base_dir, adapter_path=adapter)
    with pytest.raises(ValueError, match="holds weights the proposal-row hooks do not apply"):
        load_dual_mode(base_dir, adapter_path=save_adapter(wider, tmp_path / "embed",
                                                           target_modules=("embed_tokens",)))


def test_training_checks_read_the_record_of_training_here():
    """The presets' side of notebook 17's training cell (study helpers over a TrainedLoRA): both
    losses fell, the adapter's minutes against the budget, and its loss curves."""
    import types

    import matplotlib.pyplot as plt
    import pandas as pd

    from spec_lib.notebook import figures_lora

    rows = [{"stage": stage, "split": split, "step": step, column: 5.0 - step / 10, "other": 0.0}
            for stage, column in (("AR base", "ce"), ("proposal LoRA", "diffusion"))
            for split in ("train", "heldout") for step in range(1, 21)]
    history = pd.DataFrame(rows).assign(accuracy=0.5)
    for column in ("ce", "diffusion"):
        history[column] = history[column].fillna(4.0)
    trained = types.SimpleNamespace(history=history, record={"base_seconds": 120.0, "adapter_seconds": 300.0,
                                                             "adapter_parameters": 10, "base_parameters": 100})
    assert study.training_summary(trained)["adapter_minutes"] == 5.0
    assert study.losses_decreased(trained) == {"AR base": True, "proposal LoRA": True}
    assert study.training_checks(trained, 10.0) == {"losses_decreased": True, "adapter_training_within_budget": True}
    assert study.training_checks(trained, 4.0)["adapter_training_within_budget"] is False
    for record in (trained, None):
        plt.close(figures_lora.training_curves(record))
