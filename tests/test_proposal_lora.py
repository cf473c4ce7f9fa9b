"""Proposal-only LoRA (seed 000, App. F.2; spec_lib.lora): verifier rows are bitwise the base
model's, greedy outputs of every schedule equal the base model's AR output in both adapter
modes, Table 5's selected / evaluated rows come from the layout, a checkpoint plus an adapter
on disk loads, and bad input is refused."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

from spec_lib import decode
from spec_lib.lora import ProposalAdapter, ProposalLoRALM, adapter_rows
from spec_lib.models import DualModeLM
from spec_lib.training.lora_models import load_proposal_lora

from .conftest import MASK_ID, prompts

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
