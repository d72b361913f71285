"""The papers' experiments as one command: declared grids of pretraining variants x fine-tuning
tasks under one budget, run cell by cell with on-disk caching (`tools/run_study.py`).

Modules: `declarations` (the studies, their variants, the papers' numbers, the scales), `cells`
(cached cells with done-markers), `data` (corpus, vocab, tasks), `training` (the pretraining and
fine-tuning runs), `bilstm_head` (LTR + BiLSTM), `report` (results.json/.md, plots), `run` (the
driver and its options). See docs/studies.md.
"""
from bert_tf.studies.declarations import SCALES, STUDIES, Scale, Study, StudyError, Variant

__all__ = ["SCALES", "STUDIES", "Scale", "Study", "StudyError", "Variant"]
