"""Training: one loop, the checkpoint cache, data, objectives per paper, pipelines per model.

* :mod:`~spec_lib.training.loop`: :func:`fit` (every model trained here);
* :mod:`~spec_lib.training.cache`: where checkpoints live and their keys;
* :mod:`~spec_lib.training.data`: corpus, evaluation slices, tokenizer;
* :mod:`~spec_lib.training.teacher`: greedy teacher text;
* objectives: :mod:`~spec_lib.training.dual_mode` (seed 000), :mod:`~spec_lib.training.d2a`
  (seed 001, DEER), :mod:`~spec_lib.training.next_token` (the AR drafter);
* pipelines: :mod:`~spec_lib.training.self_speculative`, :mod:`~spec_lib.training.deer`;
* :mod:`~spec_lib.training.checkpoints`: models for experiments (presets or local paths).

Nothing here is imported by the decoding core (``masks``, ``verify``, ``models``, ``toy``,
``schedules``, ``drafters``, ``batch``).
"""
