"""The papers' experiments as one command: declared grids of pretraining variants x fine-tuning
tasks under one budget, run cell by cell with on-disk caching (`tools/run_study.py`).

Modules: `declarations` (the studies, their variants, the papers' numbers, the scales), `cells`
(cached cells with done-markers), `data` (corpus, vocab, tasks), `training` (the pretraining and
fine-tuning runs), `bilstm_head` (LTR + BiLSTM), `report` (results.json/.md, plots), `run` (the
driver and its options), `baselines` (each task's trivial baselines), `gates` (pretraining and
task gates), `statistics` (paired bootstrap, Holm, the verdict rule), `cloze` (the cloze probe),
`estimate` (a grid's CPU time). See docs/studies.md ("Method: gates, baselines, verdicts").
"""
from bert_tf.studies.declarations import SCALES, STUDIES, Scale, Study, StudyError, Variant

__all__ = ["SCALES", "STUDIES", "Scale", "Study", "StudyError", "Variant"]
