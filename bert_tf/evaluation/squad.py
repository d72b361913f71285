"""SQuAD v1.1 and v2.0 evaluation: exact match and token F1, as the official scripts compute them.

This is an independent re-implementation of the behaviour of the two official scoring scripts
(``evaluate-v1.1.py`` and ``evaluate-v2.0.py`` from rajpurkar/SQuAD-explorer); on complete
prediction files it reproduces their figures exactly.

Shared by both versions
  * Answers are normalised before comparison: lower-cased, every ``string.punctuation``
    character removed, the whole words ``a``/``an``/``the`` removed, whitespace collapsed.
  * EM of one question is 1 when the normalised prediction equals one normalised gold answer;
    F1 is the bag-of-tokens F1 of the normalised strings; both take the max over gold answers.
  * Scores are percentages.

v1.1 (:func:`evaluate_squad_v1`)
  * Returns ``{"exact_match", "f1"}``. A question without prediction scores 0 and the official
    message ``Unanswered question <id> will receive score 0.`` is reported.
  * F1 is 0 whenever prediction and gold share no token, including when both normalise to "".
  * Prediction ids that are not in the dataset are ignored (both versions).

v2.0 (:func:`evaluate_squad_v2`)
  * Gold answers that normalise to "" are dropped; a question whose list is then empty (the
    unanswerable ones) has the single gold answer "". F1 between "" and "" is 1, between ""
    and a non-empty answer 0.
  * ``na_probs`` maps question ids to the model's probability that there is no answer; with
    ``na_prob > na_prob_thresh`` the prediction is taken as "no answer" (score 1 on
    unanswerable questions, 0 otherwise). Without ``na_probs`` every probability is 0.0.
  * Returns ``exact``, ``f1``, ``total`` plus ``HasAns_*`` / ``NoAns_*`` for the splits that are
    non-empty, and -- only when ``na_probs`` is given, exactly as the official script only does
    with ``--na-prob-file`` -- ``best_exact``, ``best_exact_thresh``, ``best_f1``,
    ``best_f1_thresh`` from the official sweep over no-answer thresholds.

Decisions where the official v2.0 script has no defined output
  * Missing predictions: the official script reports ``Missing prediction for <id>``, computes
    the overall figures over the answered questions only and then fails with ``KeyError`` on
    the HasAns/NoAns splits, so it never prints a result. Here a missing prediction counts as
    wrong (EM = F1 = 0, whatever the threshold), and totals are always over all questions, as
    in v1.1. With complete predictions this changes nothing.
  * An ``na_probs`` mapping lacking some answered ids (e.g. an empty ``{}`` file; the official
    script fails with ``KeyError``): the absent ids get probability 0.0 (the model answers) and
    a warning is reported. An empty prediction set or dataset gives 0.0 scores, never a
    division by zero.
"""
from __future__ import annotations

from bert_tf.errors import UserInputError
import collections
import json
import os
import re
import string
import sys
from typing import (Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple,
                    Union)

PathLike = Union[str, "os.PathLike[str]"]
Dataset = Union[Mapping[str, Any], Sequence[Mapping[str, Any]]]
Warn = Optional[Callable[[str], None]]

_DROP_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


class SquadFileError(UserInputError):
    """A SQuAD data, prediction or no-answer-probability file that cannot be used."""


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


# --------------------------------------------------------------------------------------------
# Normalisation and per-answer scores
# --------------------------------------------------------------------------------------------
def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation, drop the articles a/an/the, collapse whitespace."""
    text = text.lower()
    text = text.translate(_DROP_PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def answer_tokens(text: str) -> List[str]:
    """Tokens of the normalised answer (empty list for an empty answer)."""
    return normalize_answer(text).split() if text else []


def exact_match(prediction: str, ground_truth: str) -> int:
    """1 when the normalised strings are equal, else 0 (same in v1.1 and v2.0)."""
    return int(normalize_answer(prediction) == normalize_answer(ground_truth))


def token_f1(prediction: str, ground_truth: str, *, empty_answers_agree: bool = True) -> float:
    """Bag-of-tokens F1 between two normalised answers.

    Args:
      prediction: predicted answer text.
      ground_truth: one gold answer text.
      empty_answers_agree: v2.0 semantics (the default): when either side normalises to no
        token, F1 is 1.0 if both do and 0.0 otherwise. ``False`` gives v1.1 semantics, where
        two empty answers share no token and score 0.0.
    """
    return _token_f1(answer_tokens(prediction), answer_tokens(ground_truth),
                     empty_answers_agree)


def _token_f1(pred_toks: List[str], gold_toks: List[str], empty_answers_agree: bool) -> float:
    if empty_answers_agree and (not pred_toks or not gold_toks):
        return float(pred_toks == gold_toks)
    common = collections.Counter(pred_toks) & collections.Counter(gold_toks)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred_toks)
    recall = num_same / len(gold_toks)
    return 2 * precision * recall / (precision + recall)


def _best_scores(pred_norm: str, golds_norm: Sequence[str],
                 empty_answers_agree: bool) -> Tuple[int, float]:
    """(max EM, max F1) of one normalised prediction over normalised gold answers.
    Normalisation is idempotent, so this equals max(exact_match(...)), max(token_f1(...))."""
    pred_toks = pred_norm.split()
    em = max(int(pred_norm == g) for g in golds_norm)
    f1 = max(_token_f1(pred_toks, g.split(), empty_answers_agree) for g in golds_norm)
    return em, f1


# --------------------------------------------------------------------------------------------
# Dataset helpers
# --------------------------------------------------------------------------------------------
def _articles(dataset: Dataset) -> Sequence[Mapping[str, Any]]:
    """Accepts either the whole SQuAD JSON object or its ``data`` list."""
    if isinstance(dataset, Mapping):
        if "data" not in dataset:
            raise SquadFileError("SQuAD dataset object has no 'data' field")
        return dataset["data"]
    return dataset


def iter_questions(dataset: Dataset) -> Iterator[Mapping[str, Any]]:
    """Yields every ``qa`` entry (with ``id`` and ``answers``) in file order."""
    for article in _articles(dataset):
        for paragraph in article["paragraphs"]:
            yield from paragraph["qas"]


def make_qid_to_has_ans(dataset: Dataset) -> Dict[str, bool]:
    """Question id -> whether the question has at least one gold answer (v2.0 splits)."""
    return {qa["id"]: bool(qa["answers"]) for qa in iter_questions(dataset)}


# --------------------------------------------------------------------------------------------
# v1.1
# --------------------------------------------------------------------------------------------
def evaluate_squad_v1(dataset: Dataset, predictions: Mapping[str, str],
                      warn: Warn = _stderr) -> Dict[str, float]:
    """Official SQuAD v1.1 metrics.

    Args:
      dataset: the SQuAD JSON object or its ``data`` list.
      predictions: question id -> answer text.
      warn: receives one message per unanswered question (default: stderr, as the official
        script); ``None`` silences them.

    Returns:
      ``{"exact_match": EM%, "f1": F1%}`` over all questions of ``dataset``.

    Raises:
      SquadFileError: a predicted question has no gold answer (the official script fails on
        ``max()`` of an empty list there).
    """
    total = 0
    em_sum = 0
    f1_sum = 0.0
    for qa in iter_questions(dataset):
        total += 1
        qid = qa["id"]
        if qid not in predictions:
            if warn is not None:
                warn(f"Unanswered question {qid} will receive score 0.")
            continue
        prediction = predictions[qid]
        golds = [normalize_answer(answer["text"]) for answer in qa["answers"]]
        if not golds:
            raise SquadFileError(f"question {qid} has no gold answer; SQuAD v1.1 scoring needs "
                                 "at least one (unanswerable questions need v2.0 scoring)")
        em, f1 = _best_scores(normalize_answer(prediction), golds, empty_answers_agree=False)
        em_sum += em
        f1_sum += f1
    if total == 0:
        return {"exact_match": 0.0, "f1": 0.0}
    return {"exact_match": 100.0 * em_sum / total, "f1": 100.0 * f1_sum / total}


# --------------------------------------------------------------------------------------------
# v2.0
# --------------------------------------------------------------------------------------------
def get_raw_scores(dataset: Dataset, predictions: Mapping[str, str],
                   warn: Warn = _stderr) -> Tuple[Dict[str, int], Dict[str, float], List[str]]:
    """v2.0 per-question EM and F1 before any no-answer threshold.

    Returns:
      ``(exact, f1, missing)``: dicts over the answered dataset questions (file order) and the
      ids of dataset questions without a prediction.
    """
    exact: Dict[str, int] = {}
    f1: Dict[str, float] = {}
    missing: List[str] = []
    for qa in iter_questions(dataset):
        qid = qa["id"]
        golds = [g for g in (normalize_answer(a["text"]) for a in qa["answers"]) if g]
        if not golds:
            golds = [""]
        if qid not in predictions:
            if warn is not None:
                warn(f"Missing prediction for {qid}")
            missing.append(qid)
            continue
        exact[qid], f1[qid] = _best_scores(normalize_answer(predictions[qid]), golds,
                                           empty_answers_agree=True)
    return exact, f1, missing


def apply_no_answer_threshold(scores: Mapping[str, float], na_probs: Mapping[str, float],
                              qid_to_has_ans: Mapping[str, bool],
                              na_prob_thresh: float) -> Dict[str, float]:
    """Replaces the score of each question with ``na_prob > na_prob_thresh`` by the score of
    answering "no answer": 1.0 on unanswerable questions, 0.0 on answerable ones."""
    out: Dict[str, float] = {}
    for qid, score in scores.items():
        if na_probs[qid] > na_prob_thresh:
            out[qid] = float(not qid_to_has_ans[qid])
        else:
            out[qid] = score
    return out


def find_best_threshold(predictions: Mapping[str, str], scores: Mapping[str, float],
                        na_probs: Mapping[str, float], qid_to_has_ans: Mapping[str, bool],
                        total: Optional[int] = None) -> Tuple[float, float]:
    """The official sweep for the no-answer threshold that maximises a score.

    Starts from "every question answered with no-answer" (score = number of unanswerable
    questions among ``scores``), then walks the questions by increasing ``na_probs`` (stable
    order of ``na_probs``), switching each to its real prediction: an answerable one adds its
    score, an unanswerable one loses 1 if the prediction is non-empty. The best running score
    and the probability where it was reached are returned.

    Mirrored quirks of the official sweep: with tied probabilities it may stop inside a group of
    equal values, at a score that no threshold actually gives; an unanswerable question whose
    prediction is non-empty but normalises to "" still costs its point. The official script
    counts the starting unanswerable questions over the whole dataset; here only those in
    ``scores`` count, which is the same whenever no prediction is missing.

    Args:
      predictions: question id -> answer text.
      scores: question id -> raw EM or F1 of the answered questions.
      na_probs: question id -> no-answer probability (must cover ``scores``).
      qid_to_has_ans: question id -> has a gold answer.
      total: denominator (default ``len(scores)``, the official one; :func:`evaluate_squad_v2`
        passes the number of dataset questions so that missing predictions count as wrong).

    Returns:
      ``(best score in %, threshold)``; ``(0.0, 0.0)`` when there is nothing to score.
    """
    denominator = len(scores) if total is None else total
    cur_score = float(sum(1 for qid in scores if not qid_to_has_ans[qid]))
    best_score = cur_score
    best_thresh = 0.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        if qid not in scores:
            continue
        if qid_to_has_ans[qid]:
            diff = scores[qid]
        else:
            diff = -1 if predictions[qid] else 0
        cur_score += diff
        if cur_score > best_score:
            best_score = cur_score
            best_thresh = na_probs[qid]
    if denominator == 0:
        return 0.0, 0.0
    return 100.0 * best_score / denominator, best_thresh


def find_best_thresholds(predictions: Mapping[str, str], exact_raw: Mapping[str, float],
                         f1_raw: Mapping[str, float], na_probs: Mapping[str, float],
                         qid_to_has_ans: Mapping[str, bool],
                         total: Optional[int] = None) -> Dict[str, float]:
    """``best_exact``, ``best_exact_thresh``, ``best_f1``, ``best_f1_thresh`` (official keys)."""
    best_exact, exact_thresh = find_best_threshold(predictions, exact_raw, na_probs,
                                                   qid_to_has_ans, total)
    best_f1, f1_thresh = find_best_threshold(predictions, f1_raw, na_probs, qid_to_has_ans,
                                             total)
    return {"best_exact": best_exact, "best_exact_thresh": exact_thresh,
            "best_f1": best_f1, "best_f1_thresh": f1_thresh}


def _eval_dict(exact: Mapping[str, float], f1: Mapping[str, float],
               qids: Sequence[str]) -> Dict[str, Any]:
    total = len(qids)
    if total == 0:
        return {"exact": 0.0, "f1": 0.0, "total": 0}
    return {"exact": 100.0 * sum(exact.get(q, 0) for q in qids) / total,
            "f1": 100.0 * sum(f1.get(q, 0.0) for q in qids) / total,
            "total": total}


def evaluate_squad_v2(dataset: Dataset, predictions: Mapping[str, str],
                      na_probs: Optional[Mapping[str, float]] = None,
                      na_prob_thresh: float = 1.0, warn: Warn = _stderr) -> Dict[str, Any]:
    """Official SQuAD v2.0 metrics (see the module docstring for the exact rules).

    Args:
      dataset: the SQuAD v2.0 JSON object or its ``data`` list.
      predictions: question id -> answer text ("" for no answer).
      na_probs: question id -> probability of no answer, or ``None`` (all 0.0, and no
        ``best_*`` keys, as the official script without ``--na-prob-file``).
      na_prob_thresh: predict no answer when ``na_prob > na_prob_thresh``.
      warn: receives warnings (missing predictions / probabilities); ``None`` silences them.

    Returns:
      An ordered dict with the official keys: ``exact``, ``f1``, ``total``, then
      ``HasAns_exact``, ``HasAns_f1``, ``HasAns_total``, ``NoAns_exact``, ``NoAns_f1``,
      ``NoAns_total`` (each split only when non-empty), then the ``best_*`` keys when
      ``na_probs`` is given.
    """
    qid_to_has_ans = make_qid_to_has_ans(dataset)
    all_qids = list(qid_to_has_ans)
    has_ans_qids = [q for q in all_qids if qid_to_has_ans[q]]
    no_ans_qids = [q for q in all_qids if not qid_to_has_ans[q]]
    exact_raw, f1_raw, _ = get_raw_scores(dataset, predictions, warn=warn)

    effective_na: Dict[str, float]
    if na_probs is None:
        effective_na = {qid: 0.0 for qid in predictions}
    else:
        effective_na = {qid: float(p) for qid, p in na_probs.items()}
        absent = [qid for qid in exact_raw if qid not in effective_na]
        if absent:
            if warn is not None:
                warn(f"{len(absent)} answered question(s) have no no-answer probability "
                     f"(first: {absent[0]}); using 0.0 for them")
            for qid in absent:
                effective_na[qid] = 0.0

    exact_thr = apply_no_answer_threshold(exact_raw, effective_na, qid_to_has_ans,
                                          na_prob_thresh)
    f1_thr = apply_no_answer_threshold(f1_raw, effective_na, qid_to_has_ans, na_prob_thresh)

    result: Dict[str, Any] = collections.OrderedDict(_eval_dict(exact_thr, f1_thr, all_qids))
    for prefix, qids in (("HasAns", has_ans_qids), ("NoAns", no_ans_qids)):
        if qids:
            for key, value in _eval_dict(exact_thr, f1_thr, qids).items():
                result[f"{prefix}_{key}"] = value
    if na_probs is not None:
        result.update(find_best_thresholds(predictions, exact_raw, f1_raw, effective_na,
                                           qid_to_has_ans, total=len(all_qids)))
    return result


# --------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------
def read_json_file(path: PathLike, what: str, allow_empty: bool = False) -> Any:
    """Loads a JSON file, raising :class:`SquadFileError` naming the file (and the line/column
    of a syntax error). ``allow_empty``: a blank file reads as ``{}``."""
    from bert_tf import io_utils  # any TensorFlow file system (gs://, ram://) or local

    try:
        with io_utils.open_file(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise SquadFileError(f"cannot read {what} {os.fspath(path)}: {e}") from e
    except UnicodeDecodeError as e:
        raise SquadFileError(f"{what} {os.fspath(path)} is not UTF-8 text: {e}") from e
    if allow_empty and not text.strip():
        return {}
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise SquadFileError(f"{what} {os.fspath(path)} is not valid JSON: {e.msg} "
                             f"(line {e.lineno}, column {e.colno})") from e


def load_dataset(path: PathLike) -> Tuple[str, List[Mapping[str, Any]]]:
    """Reads a SQuAD data file; returns ``(version field or "", data list)``."""
    obj = read_json_file(path, "SQuAD data file")
    if not isinstance(obj, Mapping) or not isinstance(obj.get("data"), list):
        raise SquadFileError(f"SQuAD data file {os.fspath(path)} has no 'data' list")
    return str(obj.get("version", "")), obj["data"]


def _string_mapping(obj: Any, path: PathLike, what: str,
                    value_type: Union[type, Tuple[type, ...]]) -> Dict[str, Any]:
    if not isinstance(obj, Mapping):
        raise SquadFileError(f"{what} {os.fspath(path)} must hold a JSON object "
                             f"(question id -> value), got {type(obj).__name__}")
    for key, value in obj.items():
        if not isinstance(value, value_type) or isinstance(value, bool):
            expected = ("a number" if isinstance(value_type, tuple)
                        else f"a {value_type.__name__}")
            raise SquadFileError(f"{what} {os.fspath(path)}: value for {key!r} should be "
                                 f"{expected}, got {value!r}")
    return dict(obj)


def load_predictions(path: PathLike) -> Dict[str, str]:
    """Reads a prediction file (question id -> answer text)."""
    return _string_mapping(read_json_file(path, "prediction file"), path, "prediction file",
                           str)


def load_na_probs(path: PathLike) -> Dict[str, float]:
    """Reads a no-answer probability file (question id -> number); a blank file is ``{}``."""
    obj = read_json_file(path, "no-answer probability file", allow_empty=True)
    return _string_mapping(obj, path, "no-answer probability file", (int, float))


def detect_version(version_field: str) -> str:
    """Maps a data file's ``version`` field to ``"1.1"`` or ``"2.0"``.

    Raises:
      ValueError: the field names neither version.
    """
    v = version_field.strip().lower().lstrip("v")
    if v in ("1.1", "1.0", "1"):
        return "1.1"
    if v in ("2.0", "2"):
        return "2.0"
    raise ValueError(f"unknown SQuAD version {version_field!r}")


def evaluate_files(data_file: PathLike, pred_file: PathLike,
                   na_prob_file: Optional[PathLike] = None, na_prob_thresh: float = 1.0,
                   version: Optional[str] = None, warn: Warn = _stderr) -> Dict[str, Any]:
    """Scores ``pred_file`` against ``data_file``, as the official script of the file's
    version (or of ``version``, "1.1"/"2.0", when given) would."""
    version_field, data = load_dataset(data_file)
    if version is None:
        try:
            version = detect_version(version_field)
        except ValueError as e:
            raise SquadFileError(f"SQuAD data file {os.fspath(data_file)}: {e}; "
                                 "pass the version explicitly") from e
    else:
        version = detect_version(version)
        if version_field and warn is not None:
            try:
                if detect_version(version_field) != version:
                    warn(f"Evaluation expects v-{version}, but got dataset with "
                         f"v-{version_field}")
            except ValueError:
                warn(f"Evaluation expects v-{version}, but got dataset with v-{version_field}")
    predictions = load_predictions(pred_file)
    if version == "1.1":
        if na_prob_file is not None and warn is not None:
            warn("--na-prob-file is ignored for SQuAD v1.1")
        return evaluate_squad_v1(data, predictions, warn=warn)
    na_probs = load_na_probs(na_prob_file) if na_prob_file is not None else None
    return evaluate_squad_v2(data, predictions, na_probs=na_probs,
                             na_prob_thresh=na_prob_thresh, warn=warn)
