"""The self-speculative model of each profile, and the stage-2 ablations notebook 10 trains.

Kept apart from :mod:`spec_lib.training.self_speculative` on purpose: a checkpoint's key
hashes its configuration values and the source of the training pipeline, not this table,
so editing one preset retrains that preset's model and nothing else.

The cpu recipe (seed 000, Sec. 2.2: one network, AR and diffusion modes, trained jointly),
chosen by the levers measured in ``benchmarks/recipe_sweep.py`` (one run per variant, on a
GPU), ``benchmarks/recipe_levers.py`` and ``benchmarks/fresh_text.py`` (on this CPU);
``docs/models.md``, "Training recipe" and "Fresh text: the levers":

* every drafting block fully masked after its anchor (``p_full=1.0``), the case Linear-,
  Packed- and Quadratic-SS decode, was the lever that mattered most;
* stage 1 long enough to write ordinary text (2,400 dual-mode steps: held-out AR CE 3.78
  against 4.48 after 750), then 600 self-distillation steps;
* stage 2 pushes the AR mode away from its own loops: sequence-level unlikelihood on the
  tokens of its own greedy text that close a repeated 4-gram (``distill_unlikelihood``,
  Welleck et al. 2020), the text regenerated every 100 steps (``distill_refresh``).  Without
  it the greedy text repeats 64-88% of its tokens on the code slices (real text: 0-7%), and
  most measured acceptance is earned on loops;
* a KL term to the AR distribution at offset 1 in stage 1 (``teacher_weight``) raised
  acceptance only on loops (repetition share above 0.9): not used.
"""

from __future__ import annotations

from .self_speculative import ModelConfig, TrainConfig

#: The self-speculative model of each profile (notebook 10 trains it; experiments load it).
PRESETS: dict[str, tuple[ModelConfig, TrainConfig]] = {
    "smoke": (ModelConfig(vocab_size=512, hidden_size=64, num_layers=2, num_heads=4),
              TrainConfig(steps=30, batch_size=8, seq_len=128, width=15, widths=(3, 7, 15), decay=8.0,
                          max_files=20, eval_every=10, distill_steps=10, distill_prompts=16, distill_new_tokens=32,
                          distill_rows=4, distill_corpus_rows=8, distill_teacher_weight=1.0)),
    "cpu": (ModelConfig(vocab_size=4096, hidden_size=256, num_layers=4, num_heads=4),
            TrainConfig(steps=2400, batch_size=16, seq_len=256, width=31, widths=(3, 7, 15, 31), n_blocks=3,
                        p_full=1.0, decay=8.0, copy_share=0.03, eval_every=100,
                        distill_steps=600, distill_prompts=256, distill_new_tokens=128, distill_rows=8,
                        distill_corpus_rows=16, distill_teacher_weight=1.0, distill_unlikelihood=1.0,
                        distill_refresh=100)),
}

#: Stage-2 ablations of the recipe (notebook 10): name -> TrainConfig overrides of stage-2
#: fields (:data:`spec_lib.training.self_speculative.STAGE2_FIELDS`), trained from the
#: preset's own stage-1 model.
ABLATIONS: dict[str, dict] = {
    "no_teacher": {"distill_teacher_weight": 0.0},   # text CE only, no KL to the AR distribution
    "ar_on_own_text": {"distill_ar": True},          # the verifier also trains on its own greedy text
    "mostly_own_text": {"distill_corpus_rows": 4, "distill_rows": 12},   # 3/4 of each batch self-generated
    "longer_distillation": {"distill_steps": 800},   # a third more stage-2 steps
    "no_unlikelihood": {"distill_unlikelihood": 0.0},   # own text refreshed, but no push away from its loops
}
