"""SQuAD post-processing: from start/end logits to answer texts, n-best lists and null odds, and the
original `run_squad.py` output files (`predictions.json`, `nbest_predictions.json`,
`null_odds.json`).

For each question, over all its windows: the `n_best_size` best start and end positions of every
window are paired; pairs outside the document part, not in their token's max-context window,
reversed, or longer than `max_answer_length` tokens are dropped. Candidates are ranked by
start + end logit, de-tokenised (`##` joined, then mapped back onto the original text by
`get_final_text`), de-duplicated by text, and the first `n_best_size` kept with a softmax
probability over them.

v2.0: `score_null` is the smallest [CLS] start + end logit over the question's windows; the
null answer "" competes in the n-best with that score, and the prediction is "" when
`score_null - (start + end logit of the best non-null answer) > null_score_diff_threshold`. That
difference is what `null_odds.json` holds.

Decisions where the original has no defined output (it raises): a v2.0 question whose n-best
holds no non-null answer (every candidate was filtered out) is predicted "" with null odds
`NO_NON_NULL_SCORE_DIFF`; a question with no window at all (empty context) gets the original's
nonce "empty" answer in v1.1 and "" in v2.0.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import math
import os
from typing import Mapping, Sequence

import numpy as np
from absl import logging

from bert_tf.io_utils import atomic_write_text
from bert_tf.tokenization import BasicTokenizer

# null_odds.json value of a v2.0 question that has no non-null candidate at all: larger than any
# real score difference, so every threshold predicts "" for it (which it does anyway).
NO_NON_NULL_SCORE_DIFF = 1000000.0


@dataclasses.dataclass
class RawResult:
    """Model output for one feature: `start_logits`, `end_logits` (length `max_seq_length`)."""

    unique_id: int
    start_logits: Sequence[float]
    end_logits: Sequence[float]


@dataclasses.dataclass
class SquadPredictions:
    """Everything `write_predictions` writes, keyed by question id in example order.

    Attributes:
      predictions: qid → answer text ("" = no answer in v2.0).
      nbest: qid → list of {"text", "probability", "start_logit", "end_logit"} dicts.
      null_odds: qid → score_null − best non-null score (v2.0 only; empty for v1.1).
      best_non_null: qid → the best non-null answer ("" if none), before the threshold (v2.0).
    """

    predictions: "collections.OrderedDict[str, str]"
    nbest: "collections.OrderedDict[str, list]"
    null_odds: "collections.OrderedDict[str, float]"
    best_non_null: "collections.OrderedDict[str, str]"


def get_best_indexes(logits: Sequence[float], n_best_size: int) -> list[int]:
    """Indices of the `n_best_size` largest logits, largest first (ties: lower index first)."""
    order = np.argsort(-np.asarray(logits, dtype=np.float64), kind="stable")
    return [int(i) for i in order[:n_best_size]]


def compute_softmax(scores: Sequence[float]) -> list[float]:
    """Softmax of raw scores as Python floats ([] for no scores)."""
    if not scores:
        return []
    max_score = max(scores)
    exp_scores = [math.exp(s - max_score) for s in scores]
    total = sum(exp_scores)
    return [x / total for x in exp_scores]


def _strip_spaces(text: str) -> tuple[str, dict[int, int]]:
    """Removes " " characters; returns the text and non-space index → original index."""
    ns_chars = []
    ns_to_s_map: dict[int, int] = {}
    for i, c in enumerate(text):
        if c == " ":
            continue
        ns_to_s_map[len(ns_chars)] = i
        ns_chars.append(c)
    return "".join(ns_chars), ns_to_s_map


def get_final_text(pred_text: str, orig_text: str, do_lower_case: bool,
                   verbose_logging: bool = False) -> str:
    """Projects a de-tokenised prediction back onto the original text.

    `pred_text` is normalised (lower-cased, accents stripped, punctuation split off by the
    BasicTokenizer), `orig_text` is the original words of the span, e.g. pred "steve smith" and
    orig "Steve Smith's": the orig text is run through `BasicTokenizer`, the prediction located
    in it, and the character positions mapped back through the texts without spaces, giving
    "Steve Smith". When the alignment fails (prediction not found, or lengths differ after
    removing spaces, e.g. characters the tokenizer deletes) `orig_text` is returned whole.
    """
    tokenizer = BasicTokenizer(do_lower_case=do_lower_case)
    tok_text = " ".join(tokenizer.tokenize(orig_text))

    start_position = tok_text.find(pred_text)
    if start_position == -1:
        if verbose_logging:
            logging.info("Unable to find text: '%s' in '%s'", pred_text, orig_text)
        return orig_text
    end_position = start_position + len(pred_text) - 1

    orig_ns_text, orig_ns_to_s_map = _strip_spaces(orig_text)
    tok_ns_text, tok_ns_to_s_map = _strip_spaces(tok_text)
    if len(orig_ns_text) != len(tok_ns_text):
        if verbose_logging:
            logging.info("Length not equal after stripping spaces: '%s' vs '%s'",
                         orig_ns_text, tok_ns_text)
        return orig_text

    tok_s_to_ns_map = {tok_index: i for i, tok_index in tok_ns_to_s_map.items()}

    orig_start_position = None
    if start_position in tok_s_to_ns_map:
        orig_start_position = orig_ns_to_s_map.get(tok_s_to_ns_map[start_position])
    if orig_start_position is None:
        if verbose_logging:
            logging.info("Couldn't map start position")
        return orig_text

    orig_end_position = None
    if end_position in tok_s_to_ns_map:
        orig_end_position = orig_ns_to_s_map.get(tok_s_to_ns_map[end_position])
    if orig_end_position is None:
        if verbose_logging:
            logging.info("Couldn't map end position")
        return orig_text

    return orig_text[orig_start_position:orig_end_position + 1]


@dataclasses.dataclass
class _Candidate:
    feature_index: int
    start_index: int
    end_index: int
    start_logit: float
    end_logit: float


def _detokenize(tok_tokens: Sequence[str]) -> str:
    """WordPieces → text: join with spaces, glue "##" pieces, collapse whitespace."""
    tok_text = " ".join(tok_tokens)
    tok_text = tok_text.replace(" ##", "").replace("##", "")
    return " ".join(tok_text.strip().split())


def compute_predictions(all_examples: Sequence, all_features: Sequence,
                        all_results: Sequence[RawResult] | Mapping[int, RawResult],
                        n_best_size: int = 20, max_answer_length: int = 30,
                        do_lower_case: bool = True, version_2_with_negative: bool = False,
                        null_score_diff_threshold: float = 0.0,
                        verbose_logging: bool = False) -> SquadPredictions:
    """Answers, n-best lists and null odds for every example (see the module docstring).

    Args:
      all_examples: `SquadExample`s (need `qas_id`, `doc_tokens`).
      all_features: their `InputFeatures` (`example_index`, `unique_id`, `tokens`,
        `token_to_orig_map`, `token_is_max_context`).
      all_results: one `RawResult` per feature (a list, or a dict by unique_id).
      n_best_size: candidates per window side and entries per n-best list.
      max_answer_length: longest answer, in WordPiece tokens.
      do_lower_case: as the tokenizer (for `get_final_text`).
      version_2_with_negative: add the null answer and compute null odds.
      null_score_diff_threshold: predict "" when the null odds exceed it (v2.0).
      verbose_logging: log alignment failures of `get_final_text`.

    Raises:
      KeyError naming the question and unique id when a feature has no result.
    """
    if n_best_size <= 0:
        raise ValueError(f"--n_best_size must be positive, got {n_best_size}")
    if max_answer_length <= 0:
        raise ValueError(f"--max_answer_length must be positive, got {max_answer_length}")
    example_index_to_features: dict[int, list] = collections.defaultdict(list)
    for feature in all_features:
        example_index_to_features[feature.example_index].append(feature)
    if isinstance(all_results, Mapping):
        unique_id_to_result = dict(all_results)
    else:
        unique_id_to_result = {int(r.unique_id): r for r in all_results}

    out = SquadPredictions(collections.OrderedDict(), collections.OrderedDict(),
                           collections.OrderedDict(), collections.OrderedDict())
    for example_index, example in enumerate(all_examples):
        features = example_index_to_features[example_index]
        prelim: list[_Candidate] = []
        score_null = 1000000.0  # the smallest null score over the windows
        min_null_feature_index = 0
        null_start_logit = 0.0
        null_end_logit = 0.0
        for feature_index, feature in enumerate(features):
            result = unique_id_to_result.get(int(feature.unique_id))
            if result is None:
                raise KeyError(f"no model output for question {example.qas_id} "
                               f"(feature unique_id {feature.unique_id})")
            start_logits = [float(x) for x in result.start_logits]
            end_logits = [float(x) for x in result.end_logits]
            if version_2_with_negative:
                feature_null_score = start_logits[0] + end_logits[0]
                if feature_null_score < score_null:
                    score_null = feature_null_score
                    min_null_feature_index = feature_index
                    null_start_logit = start_logits[0]
                    null_end_logit = end_logits[0]
            num_tokens = len(feature.tokens)
            for start_index in get_best_indexes(start_logits, n_best_size):
                for end_index in get_best_indexes(end_logits, n_best_size):
                    # Drop positions in the padding, the question or the [SEP]s, spans whose
                    # start is better covered by another window, reversed and too long spans.
                    if start_index >= num_tokens or end_index >= num_tokens:
                        continue
                    if (start_index not in feature.token_to_orig_map
                            or end_index not in feature.token_to_orig_map):
                        continue
                    if not feature.token_is_max_context.get(start_index, False):
                        continue
                    if end_index < start_index:
                        continue
                    if end_index - start_index + 1 > max_answer_length:
                        continue
                    prelim.append(_Candidate(feature_index, start_index, end_index,
                                             start_logits[start_index], end_logits[end_index]))
        if version_2_with_negative and features:
            prelim.append(_Candidate(min_null_feature_index, 0, 0, null_start_logit,
                                     null_end_logit))
        prelim.sort(key=lambda c: c.start_logit + c.end_logit, reverse=True)

        seen: set[str] = set()
        nbest: list[tuple[str, float, float]] = []
        for cand in prelim:
            if len(nbest) >= n_best_size:
                break
            if cand.start_index > 0:  # a non-null answer
                feature = features[cand.feature_index]
                tok_text = _detokenize(feature.tokens[cand.start_index:cand.end_index + 1])
                orig_doc_start = feature.token_to_orig_map[cand.start_index]
                orig_doc_end = feature.token_to_orig_map[cand.end_index]
                orig_text = " ".join(example.doc_tokens[orig_doc_start:orig_doc_end + 1])
                final_text = get_final_text(tok_text, orig_text, do_lower_case, verbose_logging)
                if final_text in seen:
                    continue
            else:
                final_text = ""
            seen.add(final_text)
            nbest.append((final_text, cand.start_logit, cand.end_logit))

        # The null answer is always in a v2.0 n-best list, even when it ranked below the cut.
        if version_2_with_negative and "" not in seen:
            nbest.append(("", null_start_logit, null_end_logit))
        # No candidate at all (possible with tiny windows): the original's nonce answer.
        if not nbest:
            nbest.append(("empty", 0.0, 0.0))

        probs = compute_softmax([s + e for _, s, e in nbest])
        nbest_json = [collections.OrderedDict(text=text, probability=p, start_logit=s,
                                              end_logit=e)
                      for (text, s, e), p in zip(nbest, probs)]
        best_non_null = next(((t, s, e) for t, s, e in nbest if t), None)

        qid = example.qas_id
        if not version_2_with_negative:
            out.predictions[qid] = nbest_json[0]["text"]
        else:
            if best_non_null is None or not features:
                score_diff = NO_NON_NULL_SCORE_DIFF
                out.best_non_null[qid] = ""
            else:
                score_diff = score_null - best_non_null[1] - best_non_null[2]
                out.best_non_null[qid] = best_non_null[0]
            out.null_odds[qid] = score_diff
            out.predictions[qid] = ("" if score_diff > null_score_diff_threshold
                                    else out.best_non_null[qid])
        out.nbest[qid] = nbest_json
    return out


def _dump(obj) -> str:
    """The original's file layout: `json.dumps(obj, indent=4) + "\\n"`."""
    return json.dumps(obj, indent=4) + "\n"


def write_prediction_files(preds: SquadPredictions, output_prediction_file: str | os.PathLike,
                           output_nbest_file: str | os.PathLike,
                           output_null_log_odds_file: str | os.PathLike | None = None) -> None:
    """Writes predictions, n-best and (when given) null odds files atomically."""
    logging.info("Writing predictions to: %s", os.fspath(output_prediction_file))
    logging.info("Writing nbest to: %s", os.fspath(output_nbest_file))
    atomic_write_text(output_prediction_file, _dump(preds.predictions))
    atomic_write_text(output_nbest_file, _dump(preds.nbest))
    if output_null_log_odds_file is not None:
        atomic_write_text(output_null_log_odds_file, _dump(preds.null_odds))


def write_predictions(all_examples: Sequence, all_features: Sequence,
                      all_results: Sequence[RawResult] | Mapping[int, RawResult],
                      n_best_size: int, max_answer_length: int, do_lower_case: bool,
                      output_prediction_file: str | os.PathLike,
                      output_nbest_file: str | os.PathLike,
                      output_null_log_odds_file: str | os.PathLike | None = None,
                      version_2_with_negative: bool = False,
                      null_score_diff_threshold: float = 0.0,
                      verbose_logging: bool = False) -> SquadPredictions:
    """The original's `write_predictions`: `compute_predictions` then the JSON files.

    `output_null_log_odds_file` is written only for v2.0. Returns the computed predictions.
    """
    preds = compute_predictions(all_examples, all_features, all_results, n_best_size,
                                max_answer_length, do_lower_case, version_2_with_negative,
                                null_score_diff_threshold, verbose_logging)
    write_prediction_files(preds, output_prediction_file, output_nbest_file,
                           output_null_log_odds_file if version_2_with_negative else None)
    return preds
