"""bench/profile_common.py, the part bench/profile_train_step.py and bench/profile_finetune.py
share: a profiled tf.function's op events are tallied per category of profile_train_step's
`categorize`, and a worker run in a checkout hands back its JSON. The profilers assert nothing;
this only checks that their shared plumbing still runs (no timing is asserted)."""
from __future__ import annotations

import argparse
import pathlib
import sys

import pytest
import tensorflow as tf

BENCH = pathlib.Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture(scope="module")
def profile_common():
    sys.path.insert(0, str(BENCH))
    try:
        import profile_common
        yield profile_common
    finally:
        sys.path.remove(str(BENCH))


def test_profile_calls_tallies_the_matmuls(profile_common):
    from profile_train_step import CATEGORIES

    a = tf.random.stateless_normal([64, 32], seed=[1, 2])
    b = tf.random.stateless_normal([32, 16], seed=[3, 4])
    f = tf.function(lambda: tf.reduce_sum(tf.nn.softmax(tf.matmul(a, b))))
    f()
    tally, value, wall = profile_common.profile_calls(lambda: float(f()), calls=2,
                                                      fine_names=True)
    assert value == pytest.approx(64.0, rel=1e-5)  # each softmax row sums to 1
    assert wall > 0
    summary = tally.by_category(CATEGORIES)
    assert set(summary["op_ms_by_category"]) == set(CATEGORIES)
    assert summary["ops_by_category"]["matmul"] == 1  # per call
    assert summary["ops_by_category"]["softmax"] >= 1
    top = tally.top_types(3, with_counts=True)
    assert all(isinstance(v, list) and len(v) == 2 for v in top.values())


def test_checkout_trees_rejects_a_folder_without_bert_tf(profile_common, tmp_path):
    ap = argparse.ArgumentParser()
    assert profile_common.checkout_trees(ap, None) == {"this": profile_common.ROOT}
    with pytest.raises(SystemExit):
        profile_common.checkout_trees(ap, str(tmp_path))
    tail = profile_common.report_tail((1.0, 2.0, 3.0))
    assert tail["loadavg_1_5_15_before"] == [1.0, 2.0, 3.0] and "timing_note" in tail
