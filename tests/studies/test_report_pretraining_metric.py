"""The model-size table's held-out perplexity cell over a variant's pretraining seeds: one
seed's value, the mean ± sample sd of several, and the interim states (the cell showed only the
last finished seed before)."""
from __future__ import annotations

from bert_tf.studies import report

METRIC = "held_out_masked_lm_perplexity"


def _row(value, pending=False, metric=METRIC):
    return {"metric": metric, "value": value, "pending": pending}


def test_pretraining_metric_cell_over_seeds():
    cell = report._pretraining_metric_text
    assert cell([_row(170.448)], METRIC) == "170.45"
    assert cell([_row(170.448), _row(173.286)], METRIC) == "171.87 ± 2.01"
    assert cell([_row(170.448), _row(None, pending=True)], METRIC) == \
        "170.45 (pending: 1 of 2 finished)"
    assert cell([_row(None, pending=True)], METRIC) == "pending"
    assert cell([_row(0.22, metric="held_out_masked_lm_accuracy")], METRIC) == "—"
    assert cell([], METRIC) == "—"
