"""The model-size table's held-out perplexity cell over a variant's pretraining seeds: one
seed's value, the mean ± sample sd of several, and the interim states (the cell showed only the
last finished seed before)."""
from __future__ import annotations

from bert_tf.studies import report

METRIC = "held_out_masked_lm_perplexity"


def _row(value, pending=False, metric=METRIC, shared=None):
    row = {"metric": metric, "value": value, "pending": pending}
    if shared is not None:
        row[report.SHARED_PERPLEXITY] = shared
    return row


def test_pretraining_metric_cell_over_seeds():
    cell = report._pretraining_metric_text
    assert cell([_row(170.448)], METRIC) == "170.45"
    assert cell([_row(170.448), _row(173.286)], METRIC) == "171.87 ± 2.01"
    assert cell([_row(170.448), _row(None, pending=True)], METRIC) == \
        "170.45 (pending: 1 of 2 finished)"
    assert cell([_row(None, pending=True)], METRIC) == "pending"
    assert cell([_row(0.22, metric="held_out_masked_lm_accuracy")], METRIC) == "—"
    assert cell([], METRIC) == "—"


def test_the_shared_held_out_file_when_every_finished_seed_has_it():
    # A pretraining cell's own evaluation masks the held-out corpus with its own seed (the
    # small grid's L2 seeds: 170.45, 173.29); the claims score every seed on the study's one
    # shared file (169.94, 175.12). The column must show what the claims test.
    both = {"L2": [_row(170.448, shared=169.944), _row(173.286, shared=175.117)],
            "L1": [_row(185.6, shared=185.6)]}
    assert report.uses_shared_held_out(both, METRIC)
    assert report._pretraining_metric_text(both["L2"], METRIC, shared=True) == "172.53 ± 3.66"
    # One finished seed without its shared figure yet: every row reads its own evaluation,
    # never a mix of the two measures.
    waiting = {"L2": [_row(170.448, shared=169.944), _row(173.286)],
               "L1": [_row(185.6, shared=185.6)]}
    assert not report.uses_shared_held_out(waiting, METRIC)
    # Pending rows do not count; no finished row at all: the own figures (there are none).
    assert report.uses_shared_held_out({"L2": [_row(170.448, shared=169.944),
                                               _row(None, pending=True)]}, METRIC)
    assert not report.uses_shared_held_out({"L2": [_row(None, pending=True)]}, METRIC)
    assert not report.uses_shared_held_out({}, None)
