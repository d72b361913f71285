"""GLUE (and XNLI / IMDb) metrics in NumPy: accuracy, F1, Matthews correlation, Pearson, Spearman.

Each function matches its usual reference (scikit-learn's ``accuracy_score``, ``f1_score``,
``matthews_corrcoef``; SciPy's ``pearsonr``, ``spearmanr``) without depending on either at run
time. :func:`glue_metrics` returns a task's official metric set under the customary names:

  ====================================  =====================================
  CoLA                                  ``mcc``
  MRPC, QQP                             ``acc``, ``f1``, ``acc_and_f1``
  STS-B                                 ``pearson``, ``spearmanr``, ``corr``
  SST-2, MNLI(-m/-mm), QNLI, RTE,       ``acc``
  WNLI, XNLI, IMDb
  ====================================  =====================================

Degenerate inputs (decided to follow the references):
  * F1 with no positive prediction and no positive label (precision or recall undefined) is
    0.0, scikit-learn's ``zero_division`` result (without its warning).
  * MCC is 0.0 whenever predictions or labels hold a single class (a zero factor in the
    denominator), as scikit-learn returns; no division happens.
  * Pearson and Spearman of a constant input are ``nan``, as SciPy returns (it also warns);
    ``corr`` is then ``nan`` too. A ``nan`` is deliberately not turned into 0: a constant
    regressor has no defined correlation, and reporting it as 0 would hide a broken model.
  * Empty inputs, or predictions and labels of different lengths, raise ``ValueError``.
"""
from __future__ import annotations

from typing import Callable, Dict, Sequence, Union

import numpy as np

ArrayLike = Union[Sequence, np.ndarray]


def _pair(predictions: ArrayLike, labels: ArrayLike) -> "tuple[np.ndarray, np.ndarray]":
    preds = np.asarray(predictions)
    labs = np.asarray(labels)
    if preds.ndim != 1 or labs.ndim != 1:
        raise ValueError(f"predictions and labels must be 1-D, got shapes {preds.shape} and "
                         f"{labs.shape}")
    if preds.shape[0] != labs.shape[0]:
        raise ValueError(f"{preds.shape[0]} predictions but {labs.shape[0]} labels")
    if preds.shape[0] == 0:
        raise ValueError("no predictions to score")
    return preds, labs


def accuracy(predictions: ArrayLike, labels: ArrayLike) -> float:
    """Fraction of predictions equal to the label."""
    preds, labs = _pair(predictions, labels)
    return float(np.mean(preds == labs))


def f1_binary(predictions: ArrayLike, labels: ArrayLike, positive_label: object = 1) -> float:
    """F1 of the positive class (``positive_label``, 1 by default): 2TP / (2TP + FP + FN);
    0.0 when that is 0 / 0."""
    preds, labs = _pair(predictions, labels)
    pred_pos = preds == positive_label
    true_pos = labs == positive_label
    tp = int(np.sum(pred_pos & true_pos))
    fp = int(np.sum(pred_pos & ~true_pos))
    fn = int(np.sum(~pred_pos & true_pos))
    denominator = 2 * tp + fp + fn
    return 0.0 if denominator == 0 else 2.0 * tp / denominator


def matthews_corrcoef(predictions: ArrayLike, labels: ArrayLike) -> float:
    """Matthews correlation coefficient (multi-class form, R_K of Gorodkin 2004); 0.0 when
    predictions or labels are constant."""
    preds, labs = _pair(predictions, labels)
    classes, inverse = np.unique(np.concatenate([labs, preds]), return_inverse=True)
    n = labs.shape[0]
    y_true, y_pred = inverse[:n], inverse[n:]
    k = classes.shape[0]
    confusion = np.zeros((k, k), dtype=np.float64)
    np.add.at(confusion, (y_true, y_pred), 1.0)
    t_sum = confusion.sum(axis=1)
    p_sum = confusion.sum(axis=0)
    n_correct = np.trace(confusion)
    n_samples = float(n)
    cov_ytyp = n_correct * n_samples - np.dot(t_sum, p_sum)
    cov_ypyp = n_samples ** 2 - np.dot(p_sum, p_sum)
    cov_ytyt = n_samples ** 2 - np.dot(t_sum, t_sum)
    if cov_ypyp * cov_ytyt == 0:
        return 0.0
    return float(cov_ytyp / np.sqrt(cov_ytyt * cov_ypyp))


def pearson(x: ArrayLike, y: ArrayLike) -> float:
    """Pearson's r (``nan`` if either input is constant), clipped to [-1, 1]."""
    a, b = _pair(x, y)
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    if a.shape[0] < 2:
        raise ValueError("Pearson correlation needs at least 2 values")
    am = a - a.mean()
    bm = b - b.mean()
    na = np.linalg.norm(am)
    nb = np.linalg.norm(bm)
    # A constant input: exactly equal values (SciPy tests the same before dividing).
    if np.all(a == a[0]) or np.all(b == b[0]) or na == 0 or nb == 0:
        return float("nan")
    r = np.dot(am / na, bm / nb)
    return float(np.clip(r, -1.0, 1.0))


def rankdata(values: ArrayLike) -> np.ndarray:
    """1-based ranks, ties given the average of the ranks they span (SciPy's 'average')."""
    a = np.asarray(values)
    order = np.argsort(a, kind="mergesort")
    sorted_a = a[order]
    # Start index of each run of equal values in sorted order.
    new_run = np.concatenate([[True], sorted_a[1:] != sorted_a[:-1]])
    run_id = np.cumsum(new_run) - 1
    starts = np.flatnonzero(new_run)
    ends = np.concatenate([starts[1:], [a.shape[0]]])  # exclusive
    run_rank = (starts + 1 + ends) / 2.0  # mean of ranks starts+1 .. ends
    ranks = np.empty(a.shape[0], dtype=np.float64)
    ranks[order] = run_rank[run_id]
    return ranks


def spearman(x: ArrayLike, y: ArrayLike) -> float:
    """Spearman's rho: Pearson's r of the tie-averaged ranks (``nan`` for a constant input)."""
    a, b = _pair(x, y)
    return pearson(rankdata(a), rankdata(b))


def _acc(p: np.ndarray, l: np.ndarray) -> Dict[str, float]:
    return {"acc": accuracy(p, l)}


def _acc_and_f1(p: np.ndarray, l: np.ndarray) -> Dict[str, float]:
    acc = accuracy(p, l)
    f1 = f1_binary(p, l)
    return {"acc": acc, "f1": f1, "acc_and_f1": (acc + f1) / 2.0}


def _mcc(p: np.ndarray, l: np.ndarray) -> Dict[str, float]:
    return {"mcc": matthews_corrcoef(p, l)}


def _corr(p: np.ndarray, l: np.ndarray) -> Dict[str, float]:
    r = pearson(p, l)
    rho = spearman(p, l)
    return {"pearson": r, "spearmanr": rho, "corr": (r + rho) / 2.0}


_TASK_METRICS: Dict[str, Callable[[np.ndarray, np.ndarray], Dict[str, float]]] = {
    "cola": _mcc,
    "mrpc": _acc_and_f1,
    "qqp": _acc_and_f1,
    "sts-b": _corr,
    "sst-2": _acc,
    "mnli": _acc,
    "mnli-m": _acc,
    "mnli-mm": _acc,
    "qnli": _acc,
    "rte": _acc,
    "wnli": _acc,
    "xnli": _acc,
    "imdb": _acc,
}
_ALIASES = {"stsb": "sts-b", "sst2": "sst-2", "mnli_m": "mnli-m", "mnli_mm": "mnli-mm",
            "mnli-matched": "mnli-m", "mnli-mismatched": "mnli-mm", "mnli_matched": "mnli-m",
            "mnli_mismatched": "mnli-mm", "sts_b": "sts-b", "sst_2": "sst-2"}


def task_names() -> "list[str]":
    """Canonical task names accepted by :func:`glue_metrics`."""
    return sorted(_TASK_METRICS)


def glue_metrics(task_name: str, predictions: ArrayLike, labels: ArrayLike) -> Dict[str, float]:
    """The official metric set of a task (case-insensitive name; ``STSB``/``SST2``/``MNLI_MM``
    spellings accepted). Classification tasks take class ids, STS-B real-valued scores.

    Raises:
      KeyError: unknown task (the message lists the known ones).
      ValueError: empty or mismatched inputs.
    """
    key = task_name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in _TASK_METRICS:
        raise KeyError(f"no GLUE metrics for task {task_name!r}; known: "
                       f"{', '.join(task_names())}")
    preds, labs = _pair(predictions, labels)
    return _TASK_METRICS[key](preds, labs)
