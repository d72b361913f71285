"""SQuAD v1.1 / v2.0 metrics: golden leaderboard scores, hand-computed cases, the CLI."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from bert_tf.evaluation import squad

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOL = PROJECT_ROOT / "tools" / "evaluate_squad.py"

# Figures of the official scripts, from ../shared/data/README.md.
GOLDEN_V1 = {
    "bert_ensemble_google.json": (86.206, 92.196),
    "slqa_plus_ensemble_alibaba.json": (81.949, 88.384),
    "rnet_plus_ensemble_msra.json": (82.469, 88.478),
    "match_lstm_boundary_ensemble_smu.json": (67.635, 76.756),
    "logistic_regression_baseline_stanford.json": (40.142, 50.982),
}
GOLDEN_V2 = {
    "bert_single_google.json": (78.742, 81.775),
    "nlnet_single_msra.json": (75.828, 78.778),
    "bidaf_selfattn_elmo_single_allenai_stanford.json": (65.704, 67.876),
}
V2_KEYS = ["exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total",
           "NoAns_exact", "NoAns_f1", "NoAns_total"]
BEST_KEYS = ["best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"]


# ------------------------------------------------------------------------------------------
# Real data
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def squad_dir(shared_data):
    return shared_data / "squad"


@pytest.fixture(scope="module")
def dev_v1(squad_dir):
    return squad.load_dataset(squad_dir / "dev-v1.1.json")


@pytest.fixture(scope="module")
def dev_v2(squad_dir):
    return squad.load_dataset(squad_dir / "dev-v2.0.reconstructed.json")


def test_version_fields(dev_v1, dev_v2):
    assert dev_v1[0] == "1.1" and squad.detect_version(dev_v1[0]) == "1.1"
    assert dev_v2[0] == "v2.0" and squad.detect_version(dev_v2[0]) == "2.0"
    assert sum(1 for _ in squad.iter_questions(dev_v1[1])) == 10570
    has_ans = squad.make_qid_to_has_ans(dev_v2[1])
    assert len(has_ans) == 11873 and sum(has_ans.values()) == 5928


@pytest.mark.parametrize("name", sorted(GOLDEN_V1))
def test_golden_v1(name, dev_v1, squad_dir):
    preds = squad.load_predictions(squad_dir / "reference_predictions" / "v1.1" / name)
    missing = []
    result = squad.evaluate_squad_v1(dev_v1[1], preds, warn=missing.append)
    assert list(result) == ["exact_match", "f1"]
    em, f1 = GOLDEN_V1[name]
    assert round(result["exact_match"], 3) == em
    assert round(result["f1"], 3) == f1
    # Only the logistic-regression baseline leaves questions unanswered (13, scored 0; its
    # file also has 28 ids that are not in the dev set, which are ignored): the golden figure
    # depends on both rules.
    assert len(missing) == (13 if "logistic" in name else 0)
    extra = set(preds) - {qa["id"] for qa in squad.iter_questions(dev_v1[1])}
    assert len(extra) == (28 if "logistic" in name else 0)


@pytest.mark.parametrize("name", sorted(GOLDEN_V2))
def test_golden_v2(name, dev_v2, squad_dir):
    preds = squad.load_predictions(squad_dir / "reference_predictions" / "v2.0" / name)
    result = squad.evaluate_squad_v2(dev_v2[1], preds, warn=None)
    assert list(result) == V2_KEYS  # no na-prob file: no best_* keys, as the official script
    exact, f1 = GOLDEN_V2[name]
    assert round(result["exact"], 3) == exact
    assert round(result["f1"], 3) == f1
    assert (result["total"], result["HasAns_total"], result["NoAns_total"]) == (11873, 5928, 5945)
    assert result["NoAns_exact"] == result["NoAns_f1"]
    # The overall figures are the question-weighted mean of the two splits.
    assert result["exact"] == pytest.approx(
        (result["HasAns_exact"] * 5928 + result["NoAns_exact"] * 5945) / 11873)
    if name == "bert_single_google.json":
        assert round(result["HasAns_exact"], 3) == 74.106
        assert round(result["HasAns_f1"], 3) == 80.182
        assert round(result["NoAns_exact"], 3) == 83.364


def _brute_force_best(preds, raw, na_probs, has_ans, qids):
    """Independent check of the threshold sweep: score of every threshold t (answer the
    questions with p <= t), best = max, threshold = smallest t reaching it (0.0 if answering
    nothing is best). As in the official sweep, switching an unanswerable question to a
    non-empty prediction costs its point."""
    p = np.array([na_probs[q] for q in qids])
    has = np.array([has_ans[q] for q in qids])
    answered_score = np.array([raw[q] if has_ans[q] else float(not preds[q]) for q in qids])
    no_answer_score = (~has).astype(float)
    order = np.argsort(p)
    # score(t_k) with t_k the k-th smallest probability: questions order[:k+1] answered.
    totals = no_answer_score.sum() + np.cumsum(answered_score[order] - no_answer_score[order])
    k = int(np.argmax(totals))  # first maximiser = smallest threshold
    if totals[k] > no_answer_score.sum() + 1e-9:
        return 100.0 * totals[k] / len(qids), float(p[order[k]])
    return 100.0 * no_answer_score.sum() / len(qids), 0.0


@pytest.mark.long
def test_best_thresholds_real_predictions(dev_v2, squad_dir):
    data = dev_v2[1]
    preds = squad.load_predictions(squad_dir / "reference_predictions" / "v2.0"
                                   / "bert_single_google.json")
    rng = np.random.default_rng(0)
    # A no-answer probability that is informative but noisy, all values distinct (with ties
    # the official sweep may stop inside a group of equal probabilities, at a score that no
    # threshold reaches, and the brute force below would not be comparable).
    qids = list(squad.make_qid_to_has_ans(data))
    logit = np.array([1.0 if preds[q] == "" else -1.0 for q in qids])
    probs = 1.0 / (1.0 + np.exp(-(logit + rng.normal(0.0, 1.0, len(qids)))))
    assert len(np.unique(probs)) == len(qids)
    na_probs = {q: float(v) for q, v in zip(qids, probs)}
    result = squad.evaluate_squad_v2(data, preds, na_probs=na_probs, warn=None)
    assert list(result) == V2_KEYS + BEST_KEYS
    # With the default threshold 1.0 nothing changes.
    assert round(result["exact"], 3) == 78.742 and round(result["f1"], 3) == 81.775
    has_ans = squad.make_qid_to_has_ans(data)
    exact_raw, f1_raw, missing = squad.get_raw_scores(data, preds, warn=None)
    assert not missing
    be, bet = _brute_force_best(preds, exact_raw, na_probs, has_ans, qids)
    bf, bft = _brute_force_best(preds, f1_raw, na_probs, has_ans, qids)
    assert result["best_exact"] == pytest.approx(be, abs=1e-9)
    assert result["best_exact_thresh"] == bet
    assert result["best_f1"] == pytest.approx(bf, abs=1e-9)
    assert result["best_f1_thresh"] == bft
    assert result["best_f1"] >= result["f1"]
    # A threshold that sends some questions to no-answer changes the overall scores.
    lower = squad.evaluate_squad_v2(data, preds, na_probs=na_probs, na_prob_thresh=0.5,
                                    warn=None)
    assert lower["exact"] != result["exact"]


# ------------------------------------------------------------------------------------------
# Hand-computed cases
# ------------------------------------------------------------------------------------------
def _dataset(qas):
    return {"version": "v2.0",
            "data": [{"title": "t", "paragraphs": [{"context": "c", "qas": qas}]}]}


def _qa(qid, *answers):
    return {"id": qid, "question": "?", "answers": [{"text": a, "answer_start": 0}
                                                     for a in answers]}


TOY = _dataset([
    _qa("q1", "the Eiffel Tower", "Eiffel Tower in Paris"),
    _qa("q2", "Paris"),
    _qa("q3"),
    _qa("q4"),
    _qa("q5", "1990"),
])
TOY_PREDS = {"q1": "Eiffel tower!", "q2": "in Paris France", "q3": "", "q4": "London", "q5": ""}
# Per question (EM, F1): q1 (1, 1) "eiffel tower" == "eiffel tower"; q2 (0, 0.5): pred tokens
# in/paris/france, gold paris -> P = 1/3, R = 1, F1 = 0.5; q3 (1, 1) "" vs no answer; q4 (0, 0)
# "London" vs no answer; q5 (0, 0) "" vs "1990".
TOY_NA = {"q1": 0.1, "q2": 0.6, "q3": 0.9, "q4": 0.8, "q5": 0.7}


def test_normalize_answer():
    assert squad.normalize_answer("  The  Eiffel-Tower, (in) A Paris!! ") == "eiffeltower in paris"
    assert squad.normalize_answer("an apple") == "apple"
    assert squad.normalize_answer("theatre") == "theatre"  # whole words only
    assert squad.normalize_answer("The.") == ""
    assert squad.normalize_answer("Ünïcode ÄN") == "ünïcode än"


def test_per_answer_scores_v1_vs_v2():
    assert squad.exact_match("The Eiffel Tower", "eiffel tower") == 1
    assert squad.token_f1("in Paris France", "Paris") == pytest.approx(0.5)
    # x b b / b b c c: 2 common tokens, P = 2/3, R = 2/4.
    precision, recall = 2 / 3, 2 / 4
    assert squad.token_f1("x b b", "b b c c") == pytest.approx(
        2 * precision * recall / (precision + recall))
    assert squad.token_f1("a b b", "b b c c") == pytest.approx(2 / 3)  # "a" is an article: P 1
    # Two empty answers: v2.0 agrees (1), v1.1 shares no token (0).
    assert squad.token_f1("", "the") == 1.0
    assert squad.token_f1("", "the", empty_answers_agree=False) == 0.0
    assert squad.token_f1("", "Paris") == 0.0 and squad.token_f1("Paris", "") == 0.0


def test_v1_hand_example():
    data = _dataset([_qa("a", "Denver Broncos", "Broncos"), _qa("b", "The"), _qa("c", "x y")])
    preds = {"a": "the Broncos", "b": "the"}
    missing = []
    result = squad.evaluate_squad_v1(data, preds, warn=missing.append)
    # a: EM 1 (vs "broncos"); b: EM 1 (both normalise to "") but F1 0 in v1.1; c: missing -> 0.
    assert result["exact_match"] == pytest.approx(200 / 3)
    assert result["f1"] == pytest.approx(100 / 3)
    assert missing == ["Unanswered question c will receive score 0."]


def test_v2_hand_example_without_na_probs():
    result = squad.evaluate_squad_v2(TOY, TOY_PREDS, warn=None)
    assert list(result) == V2_KEYS
    assert result["exact"] == pytest.approx(40.0)  # (1 + 0 + 1 + 0 + 0) / 5
    assert result["f1"] == pytest.approx(50.0)  # (1 + .5 + 1 + 0 + 0) / 5
    assert result["HasAns_exact"] == pytest.approx(100 / 3)
    assert result["HasAns_f1"] == pytest.approx(50.0)
    assert result["NoAns_exact"] == result["NoAns_f1"] == pytest.approx(50.0)
    assert (result["total"], result["HasAns_total"], result["NoAns_total"]) == (5, 3, 2)


def test_v2_hand_example_with_na_probs():
    result = squad.evaluate_squad_v2(TOY, TOY_PREDS, na_probs=TOY_NA, warn=None)
    assert list(result) == V2_KEYS + BEST_KEYS
    assert result["exact"] == pytest.approx(40.0)  # threshold 1.0: nothing changes
    # Sweep (start = 2 unanswerable questions): q1 .1 +1 -> 3 (best, EM and F1); q2 .6: EM +0,
    # F1 +.5 -> 3.5 (best F1); q5 .7 +0; q4 .8 "London" -1; q3 .9 "" +0.
    assert result["best_exact"] == pytest.approx(60.0) and result["best_exact_thresh"] == 0.1
    assert result["best_f1"] == pytest.approx(70.0) and result["best_f1_thresh"] == 0.6
    # Applying the best F1 threshold: q5, q4, q3 become no-answer -> F1 1 + .5 + 1 + 1 + 0.
    at_best = squad.evaluate_squad_v2(TOY, TOY_PREDS, na_probs=TOY_NA, na_prob_thresh=0.6,
                                      warn=None)
    assert at_best["f1"] == pytest.approx(70.0) and at_best["exact"] == pytest.approx(60.0)
    assert at_best["NoAns_exact"] == pytest.approx(100.0)
    assert at_best["HasAns_f1"] == pytest.approx(50.0)
    lower = squad.evaluate_squad_v2(TOY, TOY_PREDS, na_probs=TOY_NA, na_prob_thresh=0.5,
                                    warn=None)
    assert lower["f1"] == pytest.approx(60.0)  # q2 also no-answer now: 1 + 0 + 1 + 1 + 0


def test_v2_missing_predictions_count_as_wrong():
    preds = {k: v for k, v in TOY_PREDS.items() if k != "q1"}
    warnings = []
    result = squad.evaluate_squad_v2(TOY, preds, na_probs=TOY_NA, warn=warnings.append)
    assert warnings == ["Missing prediction for q1"]
    assert result["total"] == 5 and result["HasAns_total"] == 3
    assert result["exact"] == pytest.approx(20.0)  # only q3
    assert result["f1"] == pytest.approx(30.0)  # q2 .5 + q3 1
    assert result["HasAns_exact"] == 0.0
    # Sweep without q1: start 2; q2 F1 +.5 -> 2.5 best at .6; denominator all 5 questions.
    assert result["best_exact"] == pytest.approx(40.0) and result["best_exact_thresh"] == 0.0
    assert result["best_f1"] == pytest.approx(50.0) and result["best_f1_thresh"] == 0.6
    # A missing prediction stays wrong even when its probability is above the threshold.
    low = squad.evaluate_squad_v2(TOY, {k: v for k, v in TOY_PREDS.items() if k != "q3"},
                                  na_probs=TOY_NA, na_prob_thresh=0.0, warn=None)
    assert low["NoAns_exact"] == pytest.approx(50.0)  # q4 -> no-answer: 1; q3 missing: 0


def test_v2_empty_inputs_do_not_crash():
    empty = squad.evaluate_squad_v2(TOY, {}, na_probs={}, warn=None)
    assert empty["exact"] == 0.0 and empty["f1"] == 0.0 and empty["total"] == 5
    assert empty["best_exact"] == 0.0 and empty["best_f1"] == 0.0
    assert empty["best_exact_thresh"] == 0.0
    no_questions = squad.evaluate_squad_v2(_dataset([]), {}, na_probs={}, warn=None)
    assert no_questions == {"exact": 0.0, "f1": 0.0, "total": 0, "best_exact": 0.0,
                            "best_exact_thresh": 0.0, "best_f1": 0.0, "best_f1_thresh": 0.0}
    assert squad.evaluate_squad_v1(_dataset([]), {}) == {"exact_match": 0.0, "f1": 0.0}
    # An empty na-prob mapping with predictions: probabilities 0.0 for all, one warning.
    warnings = []
    result = squad.evaluate_squad_v2(TOY, TOY_PREDS, na_probs={}, warn=warnings.append)
    assert len(warnings) == 1 and "q1" in warnings[0]
    # All at 0.0, sweep in prediction order: q1 +1 -> 3 at 0.0, later no improvement.
    assert result["best_exact"] == pytest.approx(60.0) and result["best_exact_thresh"] == 0.0
    assert result["best_f1"] == pytest.approx(70.0)


def test_find_best_threshold_official_denominator():
    has = {"q1": True, "q2": False}
    score, thresh = squad.find_best_threshold({"q1": "a", "q2": ""}, {"q1": 1, "q2": 1},
                                              {"q2": 0.2, "q1": 0.3}, has)
    assert (score, thresh) == (100.0, 0.3)
    assert squad.find_best_threshold({}, {}, {}, has) == (0.0, 0.0)


# ------------------------------------------------------------------------------------------
# Files and command line
# ------------------------------------------------------------------------------------------
def _run_tool(*args):
    return subprocess.run([sys.executable, str(TOOL), *map(str, args)], capture_output=True,
                          text=True, cwd=PROJECT_ROOT, timeout=120)


@pytest.mark.long
def test_cli_toy_v2_and_out_file(tmp_path):
    data = tmp_path / "data.json"
    data.write_text(json.dumps(TOY))
    pred = tmp_path / "pred.json"
    pred.write_text(json.dumps(TOY_PREDS))
    na = tmp_path / "na.json"
    na.write_text(json.dumps(TOY_NA))
    proc = _run_tool(data, pred, "--na-prob-file", na, "--na-prob-thresh", "0.6")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert list(out) == V2_KEYS + BEST_KEYS and out["f1"] == pytest.approx(70.0)
    out_file = tmp_path / "eval.json"
    proc = _run_tool(data, pred, "-o", out_file)
    assert proc.returncode == 0 and proc.stdout == ""
    assert json.loads(out_file.read_text())["exact"] == pytest.approx(40.0)
    # --version 1.1: v1.1 rules (and a note that the versions differ); v1.1 cannot score the
    # unanswerable questions, which is reported by id.
    proc = _run_tool(data, pred, "--version", "1.1")
    assert proc.returncode == 1 and "q3 has no gold answer" in proc.stderr
    answerable = tmp_path / "answerable.json"
    answerable.write_text(json.dumps(_dataset([_qa("q1", "the Eiffel Tower"), _qa("q2", "Paris")])))
    proc = _run_tool(answerable, pred, "--version", "1.1")
    assert proc.returncode == 0 and "expects v-1.1" in proc.stderr
    out = json.loads(proc.stdout)
    assert list(out) == ["exact_match", "f1"]
    assert out["exact_match"] == pytest.approx(50.0) and out["f1"] == pytest.approx(75.0)
    # An empty na-prob file does not crash.
    na.write_text("")
    proc = _run_tool(data, pred, "--na-prob-file", na)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["best_f1"] == pytest.approx(70.0)


@pytest.mark.long
def test_cli_bad_inputs(tmp_path):
    data = tmp_path / "data.json"
    data.write_text(json.dumps(TOY))
    bad = tmp_path / "broken_preds.json"
    bad.write_text('{"q1": "a",\n "q2": }')
    proc = _run_tool(data, bad)
    assert proc.returncode == 1
    assert "broken_preds.json" in proc.stderr and "line 2" in proc.stderr
    wrong = tmp_path / "list.json"
    wrong.write_text("[1, 2]")
    proc = _run_tool(data, wrong)
    assert proc.returncode == 1 and "list.json" in proc.stderr
    unknown = tmp_path / "unknown_version.json"
    unknown.write_text(json.dumps({"version": "3.0", "data": []}))
    proc = _run_tool(unknown, data)
    assert proc.returncode == 1 and "unknown_version.json" in proc.stderr
    proc = _run_tool(tmp_path / "absent.json", data)
    assert proc.returncode == 1 and "absent.json" in proc.stderr


@pytest.mark.long
def test_cli_real_files(squad_dir):
    proc = _run_tool(squad_dir / "dev-v1.1.json",
                     squad_dir / "reference_predictions/v1.1/bert_ensemble_google.json")
    assert proc.returncode == 0, proc.stderr
    assert "\n" not in proc.stdout.strip()  # one line, as the official v1.1 script
    out = json.loads(proc.stdout)
    assert (round(out["exact_match"], 3), round(out["f1"], 3)) == (86.206, 92.196)
    proc = _run_tool(squad_dir / "dev-v2.0.reconstructed.json",
                     squad_dir / "reference_predictions/v2.0/bert_single_google.json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert list(out) == V2_KEYS
    assert (round(out["exact"], 3), round(out["f1"], 3)) == (78.742, 81.775)
