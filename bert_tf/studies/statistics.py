"""Statistics of the studies: per-example scores of a cell, the paired bootstrap over dev
examples and seeds, Holm's correction within a table, and the fixed verdict rule of a paper
claim (docs/studies.md, "Method: gates, baselines, verdicts" -- written before any run).

Per-example scores (`PerExample`, stored in every fine-tuning cell's result as
"per_example") let the bootstrap recompute the task's own metric on a resample of the dev
examples:

    kind "correct"  values [N] of 0/1              -> accuracy (%)       = 100 * mean
    kind "mean"     values [N] per-example score %  -> mean              (SQuAD's per-question F1)
    kind "mcc"      pred [N], gold [N] label ids    -> Matthews correlation (%)
    kind "pearson"  pred [N], gold [N] reals        -> Pearson correlation (%)
    kind "f1_counts" counts [N, 3] (correct, guessed, gold) chunks per sentence
                                                    -> entity F1 (%) = 200 c / (g + t)
    kind "nll"      counts [N, 2] (summed masked-LM cross-entropy, predictions) per held-out
                    sequence                        -> perplexity = exp(sum nll / sum n)
                                                       (not a %; lower is better)

The verdict rule (`verdict`), fixed here and in the doc:

* a claim "A > B on column C" (the paper's direction) is tested by the paired bootstrap of
  d = score(A) - score(B): `BOOTSTRAP_REPLICATES` replicates, each resampling the dev examples
  (the same indices for A and B: paired), and, independently for A and for B, the pretraining
  seeds and, within each drawn pretraining seed, the fine-tuning seeds; a side's replicate
  score is the mean of the metric over its drawn cells on the drawn examples;
* two-sided p = min(1, 2 * min(P*(d <= 0), P*(d >= 0))); the claims of one table (study) are
  corrected together by Holm's step-down method at ALPHA = 0.05;
* holds: Holm-adjusted p < ALPHA and the observed d has the paper's sign; reversed: adjusted
  p < ALPHA and the opposite sign; inconclusive: otherwise. ci_low / ci_high: the 95%
  percentile interval of d (not adjusted);
* an expected null (the paper's effect is within `NULL_MARGIN` points: NSP, the masking
  mixtures other than 0/0/100, the auxiliary LM) is not an ordering: it is "holds" when the
  95% interval of d lies inside the paper's effect +- NULL_MARGIN (equivalence), "differs"
  when the interval excludes that whole band, "inconclusive" otherwise; it takes no part in
  Holm's correction;
* a claim on a lower-is-better measure (`Claim.lower_is_better`: BERT Table 6's held-out
  perplexity) is tested on d = score(worse) - score(better), so that d > 0 is again the
  paper's direction (a perplexity reduction) and the rule above applies unchanged;
* a claim whose expected-better side has a cell under its gate (`gates`) is "inconclusive"
  with the reason "not learned" (the worse side may be under its gate: a model that learned
  nothing is a valid worse side).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Sequence

import numpy as np

ALPHA = 0.05
BOOTSTRAP_REPLICATES = 2000
NULL_MARGIN = 1.0
"""Points (of the task's % metric) around the paper's effect within which an expected null is
said to hold."""
VERDICTS = ("holds", "reversed", "inconclusive", "differs")
KINDS = ("correct", "mean", "mcc", "pearson", "f1_counts", "nll")


class StatisticsError(ValueError):
    """Cells that cannot be compared (different dev sets, unknown per-example kind)."""


@dataclasses.dataclass(frozen=True)
class Claim:
    """A paper claim, declared with its expected direction before any run.

    Attributes:
      name: short id (results.json "claims").
      study: the study (table) it belongs to; Holm's correction runs within it.
      column: the table column (a task, or a NER column's name).
      better, worse: variant names; the paper says `better` scores higher on `column`.
      paper_effect: the paper's difference better - worse, in its points (None: the paper
        states the direction without a number; an expected null needs one).
      expected_null: the paper's effect is within NULL_MARGIN: reported as an interval
        against it (equivalence), not as an ordering.
      primary: a claim the papers' large effects say must hold (docs/studies.md lists them).
      text: the claim in words.
      lower_is_better: the column is a perplexity: `better` scores LOWER; `paper_effect` is
        then the paper's worse - better (a reduction).
    """

    name: str
    study: str
    column: str
    better: str
    worse: str
    paper_effect: float | None
    expected_null: bool = False
    primary: bool = False
    text: str = ""
    lower_is_better: bool = False


@dataclasses.dataclass
class PerExample:
    """One cell's per-example scores on the dev split (see the module docstring)."""

    kind: str
    values: np.ndarray | None = None   # [N] ("correct", "mean")
    pred: np.ndarray | None = None     # [N] ("mcc", "pearson")
    gold: np.ndarray | None = None     # [N]
    counts: np.ndarray | None = None   # [N, 3] ("f1_counts"), [N, 2] ("nll")

    def __post_init__(self):
        if self.kind not in KINDS:
            raise StatisticsError(f"per-example kind {self.kind!r}; expected one of "
                                  f"{', '.join(KINDS)}")

    @property
    def size(self) -> int:
        for a in (self.values, self.pred, self.counts):
            if a is not None:
                return len(a)
        return 0

    def to_json(self) -> dict:
        out: dict = {"kind": self.kind}
        for name in ("values", "pred", "gold", "counts"):
            a = getattr(self, name)
            if a is not None:
                a = np.asarray(a)
                # Floats unrounded: a nearly constant regressor's Pearson r moves with the
                # 5th decimal of its predictions.
                out[name] = a.tolist() if a.dtype.kind in "iub" else \
                    a.astype(np.float64).tolist()
        return out

    @classmethod
    def from_json(cls, d: Mapping) -> "PerExample":
        return cls(d["kind"], **{k: np.asarray(d[k]) for k in ("values", "pred", "gold",
                                                                 "counts") if k in d})

    def metric(self, index: np.ndarray | None = None) -> np.ndarray | float:
        """The metric (%) on the examples `index` ([N] or [R, N] for R replicates at once;
        None: all). Returns a float, or [R]."""
        def take(a):
            return a if index is None else a[index]

        if self.kind == "correct" or self.kind == "mean":
            scale = 100.0 if self.kind == "correct" else 1.0
            return scale * np.mean(take(self.values).astype(np.float64), axis=-1)
        if self.kind == "nll":
            c = take(self.counts).astype(np.float64).sum(axis=-2)  # [..., 2]
            return np.exp(np.minimum(c[..., 0] / np.maximum(c[..., 1], 1.0), 50.0))
        if self.kind == "f1_counts":
            c = take(self.counts).astype(np.float64).sum(axis=-2)  # [..., 3]
            den = c[..., 1] + c[..., 2]
            return np.where(den > 0, 200.0 * c[..., 0] / np.maximum(den, 1), 0.0)
        x, y = take(self.pred).astype(np.float64), take(self.gold).astype(np.float64)
        if self.kind == "pearson":
            return 100.0 * _pearson(x, y)
        return 100.0 * _mcc(x, y)


def _pearson(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson's r along the last axis; 0 where either side is constant."""
    x = x - x.mean(axis=-1, keepdims=True)
    y = y - y.mean(axis=-1, keepdims=True)
    den = np.sqrt((x * x).sum(-1) * (y * y).sum(-1))
    return np.where(den > 0, (x * y).sum(-1) / np.where(den > 0, den, 1.0), 0.0)


def _mcc(pred: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """Matthews correlation of binary labels along the last axis (= Pearson of the 0/1
    indicators, as sklearn's for two classes); 0 for a constant side."""
    return _pearson((pred > 0.5).astype(np.float64), (gold > 0.5).astype(np.float64))


def side_scores(cells: Mapping[int, Sequence[PerExample]], example_index: np.ndarray,
                rng: np.random.Generator) -> np.ndarray:
    """One side's bootstrap scores [R]: for each replicate r, pretraining seeds drawn with
    replacement, within each drawn one its fine-tuning seeds drawn with replacement, the
    metric of every drawn cell on the replicate's examples `example_index[r]` averaged.

    Args:
      cells: pretraining seed -> the cells of its fine-tuning seeds.
      example_index: int [R, N].
    """
    groups = [list(v) for _, v in sorted(cells.items()) if len(v)]
    if not groups:
        raise StatisticsError("a side of the comparison has no cells")
    reps = example_index.shape[0]
    # The metric of every cell on every replicate: [cells, R].
    flat = [c for g in groups for c in g]
    scores = np.stack([np.asarray(c.metric(example_index), np.float64) for c in flat])
    starts = np.cumsum([0] + [len(g) for g in groups])
    out = np.zeros(reps)
    n_pre = len(groups)
    pre_draw = rng.integers(0, n_pre, size=(reps, n_pre))
    for j in range(n_pre):  # each drawn pretraining seed contributes 1/n_pre
        total = np.zeros(reps)
        for g in range(n_pre):
            sel = pre_draw[:, j] == g
            if not sel.any():
                continue
            n_ft = len(groups[g])
            ft = rng.integers(0, n_ft, size=(int(sel.sum()), n_ft)) + starts[g]
            total[sel] = scores[ft, np.nonzero(sel)[0][:, None]].mean(axis=1)
        out += total / n_pre
    return out


def paired_bootstrap(better: Mapping[int, Sequence[PerExample]],
                     worse: Mapping[int, Sequence[PerExample]],
                     replicates: int = BOOTSTRAP_REPLICATES, seed: int = 0) -> dict:
    """The paired bootstrap of d = score(better) - score(worse) (module docstring).

    Args:
      better, worse: pretraining seed -> the PerExample of each fine-tuning seed's cell, all
        on the same N dev examples.
    Returns {"diff": observed d (mean of the cells' metrics), "ci_low", "ci_high" (95%
      percentile interval), "p": two-sided bootstrap p, "replicates", "examples"}.
    """
    sizes = {c.size for side in (better, worse) for v in side.values() for c in v}
    if len(sizes) != 1:
        raise StatisticsError(f"the cells compared hold different numbers of dev examples "
                              f"({sorted(sizes)}); a paired bootstrap needs the same dev set")
    n = sizes.pop()
    rng = np.random.default_rng(seed)
    index = rng.integers(0, n, size=(replicates, n))
    d = side_scores(better, index, rng) - side_scores(worse, index, rng)

    def observed(side):
        return float(np.mean([np.mean([c.metric() for c in v]) for v in side.values()]))

    diff = observed(better) - observed(worse)
    p = min(1.0, 2.0 * min(float(np.mean(d <= 0)), float(np.mean(d >= 0))))
    lo, hi = np.percentile(d, [2.5, 97.5])
    return {"diff": round(diff, 3), "ci_low": round(float(lo), 3),
            "ci_high": round(float(hi), 3), "p": p, "replicates": replicates, "examples": n}


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (same order as given): the k-th smallest of m is
    multiplied by m - k, made monotone, capped at 1."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    m = len(p_values)
    adjusted = [0.0] * m
    running = 0.0
    for k, i in enumerate(order):
        running = max(running, min(1.0, (m - k) * p_values[i]))
        adjusted[i] = running
    return adjusted


def verdict(claim: Claim, test: dict, p_adjusted: float | None = None,
            alpha: float = ALPHA) -> str:
    """The fixed rule (module docstring). `test`: `paired_bootstrap`'s result;
    `p_adjusted`: the Holm-adjusted p (orderings; None = the unadjusted p)."""
    if claim.expected_null:
        lo, hi = claim.paper_effect - NULL_MARGIN, claim.paper_effect + NULL_MARGIN
        if lo <= test["ci_low"] and test["ci_high"] <= hi:
            return "holds"
        if test["ci_high"] < lo or test["ci_low"] > hi:
            return "differs"
        return "inconclusive"
    p = test["p"] if p_adjusted is None else p_adjusted
    if p >= alpha or test["diff"] == 0:
        return "inconclusive"
    return "holds" if test["diff"] > 0 else "reversed"


def not_learned_reason(claim: Claim, gate_passed: Mapping[tuple[str, str], bool]
                       ) -> str | None:
    """The gate part of the verdict rule: why `claim` is "inconclusive" whatever its scores
    (its expected-better side, or either side of an expected null, has a cell under its gate;
    `gate_passed`: (variant, column) -> False once one of its cells is, missing: passed), or
    None. A failure is final (a (variant, column) passes only when all its cells do), so a
    claim this names is decided before its other cells finish (`run.moot_jobs`)."""
    better = gate_passed.get((claim.better, claim.column), True)
    if claim.expected_null:
        if better and gate_passed.get((claim.worse, claim.column), True):
            return None
        return "not learned: a side is under its gate"
    return None if better else f"not learned: {claim.better} is under its gate"


def judge_claims(claims: Sequence[Claim],
                 cells: Mapping[tuple[str, str], Mapping[int, Sequence[PerExample]]],
                 gate_passed: Mapping[tuple[str, str], bool] | None = None,
                 replicates: int = BOOTSTRAP_REPLICATES, seed: int = 0) -> list[dict]:
    """Every claim's test and verdict; Holm within each study over its ordering claims.

    Args:
      cells: (variant, column) -> pretraining seed -> PerExample per fine-tuning seed.
      gate_passed: (variant, column) -> whether every cell of it passed its gates (missing:
        passed).
    Returns one dict per claim: name, study, column, better, worse, paper_effect,
      expected_null, diff, ci_low, ci_high, p, p_holm, verdict, reason.
    """
    gate_passed = gate_passed or {}
    results = []
    for i, claim in enumerate(claims):
        out = {"name": claim.name, "study": claim.study, "column": claim.column,
               "better": claim.better, "worse": claim.worse,
               "paper_effect": claim.paper_effect, "expected_null": claim.expected_null,
               "primary": claim.primary, "text": claim.text,
               "lower_is_better": claim.lower_is_better}
        a, b = (claim.better, claim.column), (claim.worse, claim.column)
        not_learned = not_learned_reason(claim, gate_passed)
        if not_learned:
            out.update(verdict="inconclusive", reason=not_learned)
        elif a not in cells or b not in cells:
            missing = claim.better if a not in cells else claim.worse
            out.update(verdict="inconclusive", reason=f"not run: no cells of {missing}")
        elif claim.lower_is_better:  # d = worse - better: a reduction is the paper's sign
            out.update(paired_bootstrap(cells[b], cells[a], replicates, seed + i))
        else:
            out.update(paired_bootstrap(cells[a], cells[b], replicates, seed + i))
        results.append(out)
    for study in dict.fromkeys(c.study for c in claims):
        family = [r for r in results if r["study"] == study and "p" in r
                  and not r["expected_null"]]
        for r, p in zip(family, holm([r["p"] for r in family])):
            r["p_holm"] = p
    for claim, r in zip(claims, results):
        if "p" in r:
            r["verdict"] = verdict(claim, r, r.get("p_holm"))
            r.setdefault("reason", "")
    return results


def per_example_from_predictions(metric: str, pred: np.ndarray, gold: np.ndarray
                                 ) -> PerExample:
    """A GLUE-style task's PerExample from its predictions [N] and gold labels [N] (ids, or
    scores for "pearson"); `metric`: the task's metric (`data.task_metric`)."""
    if metric == "accuracy":
        return PerExample("correct", values=(np.asarray(pred) == np.asarray(gold))
                          .astype(np.int8))
    if metric == "mcc":
        return PerExample("mcc", pred=np.asarray(pred).astype(np.int32),
                          gold=np.asarray(gold).astype(np.int32))
    if metric == "pearson":
        return PerExample("pearson", pred=np.asarray(pred, np.float64),
                          gold=np.asarray(gold, np.float64))
    raise StatisticsError(f"metric {metric!r} has no per-example form from predictions")


def finite(x) -> bool:
    return x is not None and math.isfinite(float(x))


def cell_interval(cell: PerExample, replicates: int = 1000, seed: int = 0) -> dict:
    """{"ci_low", "ci_high"}: the 95% percentile interval of one cell's metric over bootstrap
    resamples of its dev examples (the table's interval of a single run)."""
    n = cell.size
    if not n:
        return {}
    index = np.random.default_rng(seed).integers(0, n, size=(replicates, n))
    lo, hi = np.percentile(np.asarray(cell.metric(index), np.float64), [2.5, 97.5])
    return {"ci_low": round(float(lo), 2), "ci_high": round(float(hi), 2)}
