"""Studies: the experiments and proof checks behind the notebooks.

Seed 000: :mod:`~spec_lib.studies.sim` and :mod:`~spec_lib.studies.dominance` (Theorem 3.2),
:mod:`~spec_lib.studies.exactness` (Theorem 3.3), :mod:`~spec_lib.studies.costmodel`
(Sec. 1 cost model, Table 2), :mod:`~spec_lib.studies.bench` (decode grids, metrics, paired
bootstrap).  Seed 001: :mod:`~spec_lib.studies.acceptance` (acceptance lengths),
:mod:`~spec_lib.studies.peers` (transformers assisted generation).  Both:
:mod:`~spec_lib.studies.repetition` (how repetitive the measured text is) and
:mod:`~spec_lib.studies.paper` (the papers' printed numbers).
"""
