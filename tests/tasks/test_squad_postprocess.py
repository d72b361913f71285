"""SQuAD post-processing with handmade logits: get_final_text, n-best filtering, de-duplication,
v2.0 null scores and threshold, empty candidate lists, output file formats, scoring."""
from __future__ import annotations

import collections
import json

import numpy as np
import pytest

from bert_tf.evaluation.squad import evaluate_squad_v2
from bert_tf.tasks import squad
from bert_tf.tasks.squad.postprocess import (NO_NON_NULL_SCORE_DIFF, RawResult,
                                             compute_predictions, compute_softmax,
                                             get_best_indexes, get_final_text,
                                             write_predictions)
from bert_tf.tokenization import FullTokenizer

WORDS = ("the hu ##gue ##nots ( ) french protestants arrived in 1685 , fleeing persecution . "
         "they settled near cape of good hope who when did where what").split()
CONTEXT = ("The Huguenots (French Protestants) arrived in 1685, fleeing persecution. "
           "They settled near the Cape of Good Hope.")


@pytest.fixture()
def tokenizer(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *WORDS]) + "\n")
    return FullTokenizer(str(vocab), do_lower_case=True)


@pytest.mark.parametrize("pred, orig, lower, expected", [
    ("steve smith", "Steve Smith's", True, "Steve Smith"),
    ("Smith", "Smith's", False, "Smith"),
    ("1685", "1685,", True, "1685"),
    ("french protestants", "(French Protestants)", True, "French Protestants"),
    ("cafe", "Café.", True, "Café"),  # accents stripped by the tokenizer, kept in the output
    ("dutch", "(French Protestants)", True, "(French Protestants)"),  # not found: whole span
    ("abc", "ab\u00adc.", True, "ab\u00adc."),  # a deleted character: lengths differ
])
def test_get_final_text(pred, orig, lower, expected):
    assert get_final_text(pred, orig, lower) == expected


def test_best_indexes_and_softmax():
    assert get_best_indexes([0.1, 3.0, 3.0, -1.0, 2.0], 3) == [1, 2, 4]
    assert compute_softmax([]) == []
    probs = compute_softmax([1000.0, 1000.0])
    assert probs == [0.5, 0.5]


def _setup(tokenizer, qas, max_seq_length=64, doc_stride=16, max_query_length=8):
    data = [{"title": "t", "paragraphs": [{"context": CONTEXT, "qas": qas}]}]
    examples = squad.examples_from_squad_data(data, is_training=False)
    features = squad.convert_examples_to_features(examples, tokenizer, max_seq_length,
                                                  doc_stride, max_query_length,
                                                  is_training=False)
    return data, examples, features


def _logits(feature, start, end, base=-10.0):
    """Start/end logits with the given {token_text_or_index: value} peaks."""
    s = np.full(len(feature.input_ids), base)
    e = np.full(len(feature.input_ids), base)
    for table, arr in ((start, s), (end, e)):
        for key, value in table.items():
            idx = key if isinstance(key, int) else feature.tokens.index(key)
            arr[idx] = value
    return RawResult(feature.unique_id, s.tolist(), e.tolist())


def test_v1_best_span_and_filters(tokenizer):
    _, examples, (f,) = _setup(tokenizer, [{"id": "q", "question": "who arrived?",
                                           "answers": []}])
    # Best start is in the question (filtered); end before start (filtered); the valid best
    # pair is french..protestants -> "French Protestants" (punctuation of the words dropped).
    result = _logits(f, {"who": 9.0, "french": 5.0, "1685": 1.0},
                     {"protestants": 4.0, "the": 8.0})
    preds = compute_predictions(examples, [f], [result], n_best_size=5, max_answer_length=30)
    assert preds.predictions == {"q": "French Protestants"}
    nbest = preds.nbest["q"]
    assert nbest[0]["text"] == "French Protestants"
    assert list(nbest[0]) == ["text", "probability", "start_logit", "end_logit"]
    assert nbest[0]["start_logit"] == 5.0 and nbest[0]["end_logit"] == 4.0
    assert abs(sum(e["probability"] for e in nbest) - 1.0) < 1e-9
    assert len({e["text"] for e in nbest}) == len(nbest)  # de-duplicated
    assert preds.null_odds == {}
    # max_answer_length=1 removes the two-token answer.
    short = compute_predictions(examples, [f], [result], n_best_size=5, max_answer_length=1)
    assert short.predictions["q"] != "French Protestants"


def test_sub_token_answer_is_detokenized(tokenizer):
    _, examples, (f,) = _setup(tokenizer, [{"id": "q", "question": "who?", "answers": []}])
    i = f.tokens.index("hu")
    result = _logits(f, {i: 5.0}, {i + 2: 5.0})
    preds = compute_predictions(examples, [f], [result], n_best_size=3, max_answer_length=30)
    assert preds.predictions["q"] == "Huguenots"


def test_v1_empty_candidate_list_gives_nonce(tokenizer):
    _, examples, (f,) = _setup(tokenizer, [{"id": "q", "question": "who?", "answers": []}])
    result = _logits(f, {0: 5.0}, {0: 5.0})  # only [CLS] in the top-1: no candidate
    preds = compute_predictions(examples, [f], [result], n_best_size=1, max_answer_length=30)
    assert preds.predictions == {"q": "empty"}
    assert preds.nbest["q"] == [collections.OrderedDict(text="empty", probability=1.0,
                                                        start_logit=0.0, end_logit=0.0)]


def test_v2_null_score_and_threshold(tokenizer):
    _, examples, (f,) = _setup(tokenizer, [{"id": "q", "question": "who?", "answers": []}])
    result = _logits(f, {0: 3.0, "french": 2.0}, {0: 1.0, "protestants": 1.5})
    # score_null = 3 + 1 = 4; best non-null = 2 + 1.5 = 3.5; diff = 0.5.
    kwargs = dict(n_best_size=5, max_answer_length=30, version_2_with_negative=True)
    preds = compute_predictions(examples, [f], [result], null_score_diff_threshold=0.0, **kwargs)
    assert preds.null_odds["q"] == pytest.approx(0.5)
    assert preds.predictions["q"] == ""
    assert preds.best_non_null["q"] == "French Protestants"
    assert preds.nbest["q"][0]["text"] == ""  # the null answer ranks first
    preds = compute_predictions(examples, [f], [result], null_score_diff_threshold=0.5, **kwargs)
    assert preds.predictions["q"] == "French Protestants"  # diff must be > threshold


def test_v2_null_answer_added_when_cut_from_nbest(tokenizer):
    _, examples, (f,) = _setup(tokenizer, [{"id": "q", "question": "who?", "answers": []}])
    result = _logits(f, {0: -20.0, "french": 2.0}, {0: -20.0, "protestants": 1.5})
    preds = compute_predictions(examples, [f], [result], n_best_size=1, max_answer_length=30,
                                version_2_with_negative=True)
    assert [e["text"] for e in preds.nbest["q"]] == ["French Protestants", ""]
    assert preds.predictions["q"] == "French Protestants"
    assert preds.null_odds["q"] == pytest.approx(-40.0 - 3.5)


def test_v2_no_non_null_candidate(tokenizer):
    """The original crashes here (best_non_null_entry is None); we predict "" instead."""
    _, examples, (f,) = _setup(tokenizer, [{"id": "q", "question": "who?", "answers": []}])
    result = _logits(f, {0: 5.0}, {0: 5.0})
    preds = compute_predictions(examples, [f], [result], n_best_size=1, max_answer_length=30,
                                version_2_with_negative=True, null_score_diff_threshold=1e9)
    assert preds.predictions["q"] == ""
    assert preds.null_odds["q"] == NO_NON_NULL_SCORE_DIFF
    assert [e["text"] for e in preds.nbest["q"]] == [""]


def test_v2_min_null_over_windows_and_max_context(tokenizer):
    _, examples, features = _setup(tokenizer, [{"id": "q", "question": "who?", "answers": []}],
                                   max_seq_length=16, doc_stride=4)
    assert len(features) > 2
    results = []
    for k, f in enumerate(features):
        # Null scores 10, 8, 6, ...: the smallest is the last window's.
        peaks = {0: 5.0 - k}
        # Peak at the window's first doc token: max context only in window 0.
        results.append(_logits(f, {**peaks, 4: 4.0}, {**peaks, 4: 4.0}))
    preds = compute_predictions(examples, features, results, n_best_size=3, max_answer_length=30,
                                version_2_with_negative=True)
    last = len(features) - 1
    assert preds.null_odds["q"] == pytest.approx(2 * (5.0 - last) - 8.0)
    assert preds.best_non_null["q"] == "The"  # window 0's first token; others not max context
    texts = [e["text"] for e in preds.nbest["q"]]
    assert texts.count("") == 1 and len(set(texts)) == len(texts)


def test_missing_result_names_question(tokenizer):
    _, examples, features = _setup(tokenizer, [{"id": "qx", "question": "who?", "answers": []}])
    with pytest.raises(KeyError, match="qx"):
        compute_predictions(examples, features, [], 5, 30)


def test_output_files_and_v2_scores(tokenizer, tmp_path):
    qas = [{"id": "a", "question": "who?", "is_impossible": False,
            "answers": [{"text": "French Protestants", "answer_start": 15}]},
           {"id": "b", "question": "when?", "is_impossible": True, "answers": []},
           {"id": "c", "question": "where?", "is_impossible": False,
            "answers": [{"text": "Cape of Good Hope", "answer_start": 99}]}]
    data, examples, features = _setup(tokenizer, qas)
    results = [_logits(features[0], {0: 0.0, "french": 3.0}, {0: 0.0, "protestants": 3.0}),
               _logits(features[1], {0: 4.0, "1685": 1.0}, {0: 4.0, "1685": 1.0}),
               _logits(features[2], {0: 3.0, "cape": 2.0}, {0: 3.0, "hope": 2.0})]
    files = [tmp_path / n for n in ("predictions.json", "nbest_predictions.json",
                                    "null_odds.json")]
    preds = write_predictions(examples, features, results, 20, 30, True, *files,
                              version_2_with_negative=True, null_score_diff_threshold=0.0)
    texts = [p.read_text() for p in files]
    assert all(t.endswith("}\n") and t.startswith("{\n    \"a\": ") for t in texts)
    assert json.loads(texts[0]) == {"a": "French Protestants", "b": "", "c": ""}
    assert list(json.loads(texts[0])) == ["a", "b", "c"]
    assert json.loads(texts[2]) == pytest.approx({"a": -6.0, "b": 6.0, "c": 2.0})
    nbest = json.loads(texts[1])
    assert list(nbest["a"][0]) == ["text", "probability", "start_logit", "end_logit"]
    assert texts[0] == json.dumps(preds.predictions, indent=4) + "\n"

    metrics = squad.evaluate_predictions(data, preds, True, 0.0)
    official = evaluate_squad_v2(data, preds.predictions, warn=None)
    assert metrics["exact"] == official["exact"] == pytest.approx(200 / 3)
    assert metrics["f1"] == official["f1"]
    # Answering "c" (diff 2.0) would be right: the best threshold lets it through.
    assert metrics["best_exact"] == 100.0
    assert 2.0 <= metrics["best_f1_thresh"] < 6.0
    # v1.1 writes no null-odds file.
    v1 = tmp_path / "v1"
    write_predictions(examples, features, results, 20, 30, True, v1 / "p.json", v1 / "n.json",
                      v1 / "odds.json")
    assert sorted(p.name for p in v1.iterdir()) == ["n.json", "p.json"]
