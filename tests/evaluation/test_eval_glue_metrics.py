"""GLUE metrics against scikit-learn / SciPy on predictions built from real GLUE dev labels."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from bert_tf.evaluation import glue_metrics as gm

sklearn_metrics = pytest.importorskip("sklearn.metrics")
scipy_stats = pytest.importorskip("scipy.stats")


def _labels(path, column, header):
    """The label column of a GLUE tsv (split on tabs only: sentences contain quotes)."""
    rows = path.read_text(encoding="utf-8-sig").splitlines()
    if header:
        rows = rows[1:]
    return [row.split("\t")[column] for row in rows if row.strip()]


@pytest.fixture(scope="module")
def glue_labels(shared_data):
    glue = shared_data / "glue"
    out = {
        "CoLA": np.array(_labels(glue / "CoLA" / "dev.tsv", 1, header=False), dtype=int),
        "MRPC": np.array(_labels(glue / "MRPC" / "dev.tsv", 0, header=True), dtype=int),
        "STS-B": np.array(_labels(glue / "STS-B" / "dev.tsv", -1, header=True), dtype=float),
        "RTE": np.array(_labels(glue / "RTE" / "dev.tsv", -1, header=True)),
        "SST-2": np.array(_labels(glue / "SST-2" / "dev.tsv", -1, header=True), dtype=int),
    }
    return out


def _flip(labels, rate, seed, classes=(0, 1)):
    rng = np.random.default_rng(seed)
    preds = labels.copy()
    flip = rng.random(len(labels)) < rate
    preds[flip] = rng.choice(np.array(classes), size=int(flip.sum()))
    return preds


def test_label_columns(glue_labels):
    # Row counts from ../shared/data/README.md.
    assert len(glue_labels["CoLA"]) == 1043 and set(glue_labels["CoLA"]) == {0, 1}
    assert len(glue_labels["MRPC"]) == 408 and set(glue_labels["MRPC"]) == {0, 1}
    assert len(glue_labels["STS-B"]) == 1500
    assert glue_labels["STS-B"].min() >= 0 and glue_labels["STS-B"].max() <= 5
    assert len(glue_labels["RTE"]) == 277
    assert set(glue_labels["RTE"]) == {"entailment", "not_entailment"}
    assert len(glue_labels["SST-2"]) == 872


@pytest.mark.parametrize("task", ["CoLA", "MRPC", "SST-2"])
@pytest.mark.parametrize("seed, rate", [(0, 0.1), (1, 0.35), (2, 0.9)])
def test_binary_metrics_match_sklearn(glue_labels, task, seed, rate):
    y = glue_labels[task]
    p = _flip(y, rate, seed)
    assert gm.accuracy(p, y) == pytest.approx(sklearn_metrics.accuracy_score(y, p), abs=1e-12)
    assert gm.f1_binary(p, y) == pytest.approx(sklearn_metrics.f1_score(y, p), abs=1e-12)
    assert gm.matthews_corrcoef(p, y) == pytest.approx(sklearn_metrics.matthews_corrcoef(y, p),
                                                       abs=1e-12)


def test_task_metric_sets(glue_labels):
    y = glue_labels["CoLA"]
    p = _flip(y, 0.2, 3)
    cola = gm.glue_metrics("CoLA", p, y)
    assert list(cola) == ["mcc"]
    assert cola["mcc"] == pytest.approx(sklearn_metrics.matthews_corrcoef(y, p), abs=1e-12)
    assert 0.3 < cola["mcc"] < 0.9  # a real, non-trivial value

    y = glue_labels["MRPC"]
    p = _flip(y, 0.2, 4)
    mrpc = gm.glue_metrics("mrpc", p, y)
    assert list(mrpc) == ["acc", "f1", "acc_and_f1"]
    acc, f1 = sklearn_metrics.accuracy_score(y, p), sklearn_metrics.f1_score(y, p)
    assert mrpc["acc"] == pytest.approx(acc) and mrpc["f1"] == pytest.approx(f1)
    assert mrpc["acc_and_f1"] == pytest.approx((acc + f1) / 2)
    assert gm.glue_metrics("QQP", p, y) == mrpc

    # RTE: string labels work for accuracy.
    y = glue_labels["RTE"]
    p = _flip(y, 0.3, 5, classes=("entailment", "not_entailment"))
    rte = gm.glue_metrics("RTE", p, y)
    assert list(rte) == ["acc"]
    assert rte["acc"] == pytest.approx(sklearn_metrics.accuracy_score(y, p))

    for task in ["SST-2", "sst2", "MNLI", "MNLI-m", "mnli-mm", "MNLI_MM", "QNLI", "WNLI", "XNLI",
                 "IMDb"]:
        assert list(gm.glue_metrics(task, [0, 1, 2, 2], [0, 1, 1, 2])) == ["acc"]
        assert gm.glue_metrics(task, [0, 1, 2, 2], [0, 1, 1, 2])["acc"] == 0.75


def test_sts_b_matches_scipy(glue_labels):
    y = glue_labels["STS-B"]
    rng = np.random.default_rng(6)
    # Noisy regressor output rounded to 0.25: many ties in both predictions and labels.
    p = np.round(np.clip(y + rng.normal(0.0, 0.9, len(y)), 0.0, 5.0) * 4) / 4
    assert len(np.unique(p)) < 30 and len(np.unique(y)) < len(y)
    result = gm.glue_metrics("STS-B", p, y)
    assert list(result) == ["pearson", "spearmanr", "corr"]
    r = scipy_stats.pearsonr(p, y)[0]
    rho = scipy_stats.spearmanr(p, y)[0]
    assert result["pearson"] == pytest.approx(r, abs=1e-12)
    assert result["spearmanr"] == pytest.approx(rho, abs=1e-12)
    assert result["corr"] == pytest.approx((r + rho) / 2, abs=1e-12)
    assert 0.5 < result["pearson"] < 0.95
    assert gm.glue_metrics("stsb", p, y) == result
    np.testing.assert_allclose(gm.rankdata(p), scipy_stats.rankdata(p), rtol=0, atol=0)
    np.testing.assert_allclose(gm.rankdata(y), scipy_stats.rankdata(y), rtol=0, atol=0)


def test_rankdata_ties_by_hand():
    values = [20, 10, 20, 5, 20, 30]
    # sorted: 5 (rank 1), 10 (2), 20 20 20 (ranks 3, 4, 5 -> average 4), 30 (6)
    np.testing.assert_array_equal(gm.rankdata(values), [4, 2, 4, 1, 4, 6])
    # Spearman of perfectly monotone data with ties is 1.
    assert gm.spearman([1, 2, 2, 3], [10, 20, 20, 40]) == pytest.approx(1.0)


def test_multiclass_mcc_matches_sklearn():
    rng = np.random.default_rng(7)
    y = rng.integers(0, 3, 500)
    p = np.where(rng.random(500) < 0.6, y, rng.integers(0, 3, 500))
    assert gm.matthews_corrcoef(p, y) == pytest.approx(sklearn_metrics.matthews_corrcoef(y, p),
                                                       abs=1e-12)
    # Prediction classes absent from the labels are handled too.
    p[:5] = 7
    assert gm.matthews_corrcoef(p, y) == pytest.approx(sklearn_metrics.matthews_corrcoef(y, p),
                                                       abs=1e-12)


def test_degenerate_cases(glue_labels):
    y = glue_labels["CoLA"]
    ones = np.ones_like(y)
    zeros = np.zeros_like(y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sk_mcc_ones = sklearn_metrics.matthews_corrcoef(y, ones)
        sk_f1_zeros = sklearn_metrics.f1_score(y, zeros, zero_division=0)
        sk_f1_none = sklearn_metrics.f1_score(zeros, zeros, zero_division=0)
    # All-one-class predictions: MCC 0 (no division by zero), as scikit-learn.
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning from a 0/0 either
        assert gm.matthews_corrcoef(ones, y) == 0.0 == sk_mcc_ones
        assert gm.glue_metrics("cola", zeros, y) == {"mcc": 0.0}
        assert gm.matthews_corrcoef(zeros, zeros) == 0.0
        # Never predicting the positive class: F1 0; nothing positive at all: F1 0 too.
        assert gm.f1_binary(zeros, y) == 0.0 == sk_f1_zeros
        assert gm.f1_binary(zeros, zeros) == 0.0 == sk_f1_none
        assert gm.f1_binary(ones, y) == pytest.approx(sklearn_metrics.f1_score(y, ones))
        # Constant predictions for STS-B: correlations are undefined -> nan, as SciPy.
        sts = glue_labels["STS-B"]
        const = np.full_like(sts, 2.5)
        result = gm.glue_metrics("STS-B", const, sts)
    assert all(math.isnan(v) for v in result.values())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert math.isnan(scipy_stats.pearsonr(const, sts)[0])
        assert math.isnan(scipy_stats.spearmanr(const, sts)[0])
    # Perfect predictions.
    assert gm.glue_metrics("STS-B", sts, sts)["corr"] == pytest.approx(1.0)
    assert gm.glue_metrics("MRPC", y, y) == {"acc": 1.0, "f1": 1.0, "acc_and_f1": 1.0}
    assert gm.matthews_corrcoef(1 - y, y) == pytest.approx(-1.0)


def test_bad_inputs():
    with pytest.raises(KeyError, match="SQuAD.*known: cola"):
        gm.glue_metrics("SQuAD", [1], [1])
    with pytest.raises(ValueError, match="3 predictions but 2 labels"):
        gm.accuracy([1, 0, 1], [1, 0])
    with pytest.raises(ValueError, match="no predictions"):
        gm.glue_metrics("rte", [], [])
    with pytest.raises(ValueError, match="1-D"):
        gm.accuracy([[1, 0]], [[1, 0]])
