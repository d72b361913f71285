"""The verdict code on synthetic cells (bert_tf/studies/statistics.py): a known effect is found,
a null is not, Holm's correction turns a borderline claim inconclusive, the metrics recomputed
on resamples are the tasks' own. Synthetic, no training: a few seconds."""
from __future__ import annotations

import numpy as np
import pytest

from bert_tf.studies.statistics import (Claim, PerExample, StatisticsError, holm,
                                        judge_claims, paired_bootstrap, verdict)

N = 800


def _cells(rate: float, seed: int, pre_seeds=(1, 2), ft_seeds=(1, 2, 3), shift=0.0):
    """Correct/incorrect dev answers of a model whose accuracy is `rate` (+ a per-pretraining-
    seed shift), the example difficulty shared by every model (so the comparison is paired)."""
    difficulty = np.random.default_rng(0).uniform(size=N)
    out = {}
    for p in pre_seeds:
        rng = np.random.default_rng(1000 * seed + p)
        r = rate + shift * (p - 1.5)
        out[p] = [PerExample("correct", values=(difficulty + rng.normal(0, .15, N)
                                                < r).astype(np.int8)) for _ in ft_seeds]
    return out


def test_a_known_effect_is_found_and_a_null_is_not():
    cells = {("big", "SST-2"): _cells(0.80, 1), ("small", "SST-2"): _cells(0.70, 2),
             ("same", "SST-2"): _cells(0.70, 3)}
    claims = [Claim("effect", "s", "SST-2", "big", "small", 5.0),
              Claim("reversed", "s", "SST-2", "small", "big", 5.0),
              Claim("none", "s", "SST-2", "same", "small", 5.0)]
    got = {r["name"]: r for r in judge_claims(claims, cells, replicates=500)}
    assert got["effect"]["verdict"] == "holds"
    assert got["effect"]["ci_low"] > 5 and got["effect"]["ci_high"] < 15
    assert got["reversed"]["verdict"] == "reversed"
    assert got["none"]["verdict"] == "inconclusive"
    assert got["none"]["ci_low"] < 0 < got["none"]["ci_high"]


def test_expected_null_is_an_interval_against_the_paper():
    cells = {("a", "NER"): _cells(0.70, 1), ("b", "NER"): _cells(0.70, 2),
             ("c", "NER"): _cells(0.85, 3)}
    null = Claim("nsp", "t", "NER", "a", "b", 0.3, expected_null=True)
    far = Claim("far", "t", "NER", "c", "b", 0.3, expected_null=True)
    got = {r["name"]: r for r in judge_claims([null, far], cells, replicates=500)}
    assert got["nsp"]["verdict"] in ("holds", "inconclusive")  # never an ordering
    assert "p_holm" not in got["nsp"]
    assert got["far"]["verdict"] == "differs"


def test_holm_changes_a_borderline_claim():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    claim = Claim("x", "s", "c", "a", "b", 1.0)
    test = {"diff": 1.2, "p": 0.03, "ci_low": 0.1, "ci_high": 2.3}
    assert verdict(claim, test) == "holds"
    assert verdict(claim, test, p_adjusted=holm([0.03, 0.04, 0.045])[0]) == "inconclusive"


def test_a_claim_whose_better_side_is_not_learned_is_inconclusive():
    cells = {("a", "c"): _cells(0.8, 1), ("b", "c"): _cells(0.6, 2)}
    got = judge_claims([Claim("x", "s", "c", "a", "b", 3.0)], cells,
                       gate_passed={("a", "c"): False}, replicates=100)[0]
    assert got["verdict"] == "inconclusive" and got["reason"].startswith("not learned")
    got = judge_claims([Claim("x", "s", "c", "a", "b", 3.0)], cells,
                       gate_passed={("b", "c"): False}, replicates=100)[0]
    assert got["verdict"] == "holds"  # a worse side that learned nothing is still worse


def test_metrics_are_the_tasks_own_and_round_trip():
    from sklearn.metrics import matthews_corrcoef

    rng = np.random.default_rng(3)
    pred, gold = rng.integers(0, 2, 300), rng.integers(0, 2, 300)
    cell = PerExample("mcc", pred=pred, gold=gold)
    assert cell.metric() == pytest.approx(100 * matthews_corrcoef(gold, pred))
    x, y = rng.normal(size=300), rng.normal(size=300)
    assert PerExample("pearson", pred=x, gold=y).metric() == pytest.approx(
        100 * np.corrcoef(x, y)[0, 1])
    counts = np.array([[1, 2, 1], [0, 1, 1], [2, 2, 2]])
    assert PerExample("f1_counts", counts=counts).metric() == pytest.approx(
        200 * 3 / (5 + 4))
    back = PerExample.from_json(cell.to_json())
    assert back.metric() == pytest.approx(cell.metric())
    with pytest.raises(StatisticsError, match="kind"):
        PerExample("auc")


def test_different_dev_sets_are_refused():
    a = {1: [PerExample("correct", values=np.ones(10, np.int8))]}
    b = {1: [PerExample("correct", values=np.ones(11, np.int8))]}
    with pytest.raises(StatisticsError, match="same dev set"):
        paired_bootstrap(a, b, replicates=10)


def test_claim_rows_and_the_report_of_a_study():
    """run.py's claim rows from fine-tuning rows (as _run writes them) and results.md's claims
    table, baseline row and not-learned marks; the declared claims name real variants."""
    from bert_tf.studies import STUDIES
    from bert_tf.studies.declarations import CLAIMS
    from bert_tf.studies.report import study_section
    from bert_tf.studies.run import claim_rows

    for c in CLAIMS:
        names = {v.name for v in STUDIES[c.study].variants}
        assert c.better in names and c.worse in names, c
        assert not c.expected_null or c.paper_effect is not None
    study = STUDIES["gpt_ablations"]
    rates = {"aux_lm": 0.8, "no_aux_lm": 0.8, "no_pretraining": 0.5}
    rows, per_example = [], {}
    for k, (variant, rate) in enumerate(rates.items()):
        pseeds = [None] if variant == "no_pretraining" else [1, 2]
        for p in pseeds:
            for cell in _cells(rate, 10 * k + (p or 0), pre_seeds=(1,))[1]:
                value = float(cell.metric())
                row = {"study": study.name, "variant": variant, "task": "SST-2",
                       "column": "SST-2", "kind": "finetuning", "metric": "accuracy",
                       "value": value, "seed": 1, "pretraining_seed": p, "model": "L2/H128/A2",
                       "baseline": 60.0, "baseline_name": "Naive Bayes",
                       "gate_passed": value > 60.0, "cell": f"c{len(rows)}"}
                per_example[id(row)] = cell
                rows.append(row)
    claims = {r["variant"]: r for r in claim_rows(study, rows, per_example)}
    assert claims["g5_pretrained_sst2"]["verdict"] == "holds"
    assert claims["g5_pretrained_sst2"]["kind"] == "claim"
    assert claims["g5_aux_lm_sst2"]["expected_null"]
    md = "\n".join(study_section(study, rows + list(claims.values()), [], "."))
    assert "| Trivial baseline (gate) | 60.0 (Naive Bayes) |" in md
    assert "Transformer w/o pre-training (not learned: SST-2)" in md
    assert "not learned (left out): no_pretraining" in md
    assert "| pretrained GPT > GPT from random weights (SST-2, paper 91.3 vs 84.0) (primary) " \
           "| SST-2 |" in md


def _nll_cells(loss: float, seed: int, pre_seeds=(1, 2), n: int = 400):
    """Per-sequence held-out masked-LM counts (summed cross-entropy, predictions) of a model
    whose mean loss is `loss`, the sequences' difficulty shared by every model (paired)."""
    rng0 = np.random.default_rng(0)
    preds = rng0.integers(5, 30, n).astype(np.float64)
    difficulty = rng0.normal(0, 0.5, n)
    out = {}
    for p in pre_seeds:
        rng = np.random.default_rng(1000 * seed + p)
        per_token = np.maximum(loss + difficulty + rng.normal(0, 0.2, n), 0.01)
        out[p] = [PerExample("nll", counts=np.stack([per_token * preds, preds], -1))]
    return out


def test_a_perplexity_claim_is_lower_is_better():
    """Table 6's held-out perplexity claims: the larger model's LOWER perplexity holds, a
    higher one is reversed; the metric is exp(sum nll / sum predictions)."""
    counts = np.array([[2.0, 1.0], [6.0, 3.0]])
    assert PerExample("nll", counts=counts).metric() == pytest.approx(np.exp(8.0 / 4.0))
    cells = {("big", "LM (ppl)"): _nll_cells(3.0, 1), ("small", "LM (ppl)"): _nll_cells(3.3, 2),
             ("same", "LM (ppl)"): _nll_cells(3.3, 3)}
    claims = [Claim("lower", "s", "LM (ppl)", "big", "small", 1.85, lower_is_better=True),
              Claim("higher", "s", "LM (ppl)", "small", "big", 1.85, lower_is_better=True),
              Claim("none", "s", "LM (ppl)", "same", "small", 1.85, lower_is_better=True)]
    got = {r["name"]: r for r in judge_claims(claims, cells, replicates=500)}
    assert got["lower"]["verdict"] == "holds"
    expected = np.exp(3.3 + 0.0) - np.exp(3.0)  # roughly: the difficulty term shifts both
    assert 0 < got["lower"]["ci_low"] < got["lower"]["diff"] < got["lower"]["ci_high"]
    assert got["lower"]["diff"] == pytest.approx(expected, rel=0.5)
    assert got["higher"]["verdict"] == "reversed" and got["higher"]["diff"] < 0
    assert got["none"]["verdict"] == "inconclusive"


def test_perplexity_claim_rows_from_pretraining_rows():
    """run.py's claim rows of BERT Table 6 from its pretraining rows (the per-sequence
    held-out scores `_run` attaches to them): the declared claims on "LM (ppl)"."""
    from bert_tf.studies import STUDIES
    from bert_tf.studies.run import claim_rows

    study = STUDIES["bert_model_size"]
    losses = {"L3_H768_A12": 3.4, "L6_H768_A12": 3.2, "L12_H768_A12": 3.0}
    rows, per_example = [], {}
    for k, (variant, loss) in enumerate(losses.items()):
        for p, cells in _nll_cells(loss, k + 1).items():
            row = {"study": study.name, "variant": variant, "task": "pretraining",
                   "kind": "pretraining", "metric": "held_out_masked_lm_perplexity",
                   "value": float(cells[0].metric()), "seed": p, "pretraining_seed": p,
                   "gate_passed": True}
            per_example[id(row)] = cells[0]
            rows.append(row)
    got = {r["variant"]: r for r in claim_rows(study, rows, per_example)}
    assert got["t6_l12_over_l3_ppl"]["verdict"] == "holds"
    assert got["t6_l12_over_l3_ppl"]["lower_is_better"] and got["t6_l12_over_l3_ppl"]["primary"]
    assert got["t6_l6_over_l3_ppl"]["task"] == "LM (ppl)"
    # Without per-sequence scores (cells written before they existed) no perplexity claim.
    assert not [r for r in claim_rows(study, rows, {}) if r["task"] == "LM (ppl)"]


def test_estimate_of_the_small_grid_fits_its_budget():
    """--estimate runs nothing and needs no data; the new small grid (2 pretraining x 3
    fine-tuning seeds) is declared within ~10 CPU-hours (docs/studies.md, "Method")."""
    from bert_tf.studies.run import StudyRunOptions, run_study

    said = []
    got = run_study(StudyRunOptions(study="all", scale="small", estimate=True), say=said.append)
    total = sum(c.seconds for c in got["estimate"]) / 3600
    assert 8.0 < total < 10.5 and "total: " in said[0]
    kinds = {c.kind for c in got["estimate"]}
    assert kinds == {"data", "pretraining", "baseline", "finetuning", "cloze", "held_out",
                     "zero_shot"}
    assert sum(c.kind == "pretraining" for c in got["estimate"]) == 14  # 7 runs x 2 seeds
