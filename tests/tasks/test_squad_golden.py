"""Golden values from the original google-research/bert `run_squad.py` (bert-tensorflow 1.0.4's
copy, run once on the handmade sample below with its pseudo-logits, the original's
`read_squad_examples`, `convert_examples_to_features` and `write_predictions`): our features
and the three output files must be the same, byte for byte."""
from __future__ import annotations

import hashlib
import json
import math
import pathlib
import sys

import pytest

from bert_tf.tasks import squad
from bert_tf.tasks.squad.postprocess import RawResult, write_predictions
from bert_tf.tokenization import FullTokenizer

WORDS = ("the hu ##gue ##nots ( ) french protestants arrived in 1685 , fleeing persecution . "
         "they settled near cape of good hope who when did where what year came a ##b ##c "
         "café - 1943 1895 smith ' s steve ? \" ran river and mountains north south").split()
VOCAB_TEXT = "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n"
MAX_SEQ, STRIDE, MAX_QUERY, N_BEST, MAX_ANSWER, THRESHOLD = 24, 5, 6, 10, 8, -10.0

P1 = ("The Huguenots (French Protestants) arrived in 1685, fleeing persecution. They settled "
      "near the Cape of Good Hope.")
P2 = ("Steve Smith's café (1895-1943) ran north and south near the river,  the mountains and "
      "the Cape.\tThey came abc.")


def data(v2: bool) -> list:
    """Two paragraphs, five questions (one impossible in v2.0)."""
    qas1 = [
        {"id": "p1-who", "question": "Who arrived in 1685?",
         "answers": [{"text": "French Protestants", "answer_start": P1.index("French")}]},
        {"id": "p1-when", "question": "When did the Huguenots arrive near the river?",
         "answers": [{"text": "1685", "answer_start": P1.index("1685")}]},
        {"id": "p1-where", "question": "Where?",
         "answers": [{"text": "Cape of Good Hope", "answer_start": P1.index("Cape")}]},
    ]
    qas2 = [
        {"id": "p2-year", "question": "What year?",
         "answers": [{"text": "1895", "answer_start": P2.index("1895")}]},
        {"id": "p2-who", "question": "Who ran the café?",
         "answers": [{"text": "Steve Smith", "answer_start": 0}]},
    ]
    if v2:
        for qa in qas1 + qas2:
            qa["is_impossible"] = False
        qas2.append({"id": "p2-none", "question": "Who came north?", "answers": [],
                     "is_impossible": True})
    return [{"title": "t", "paragraphs": [{"context": P1, "qas": qas1},
                                          {"context": P2, "qas": qas2}]}]


def logits(unique_id: int, length: int, which: int) -> list[float]:
    """Deterministic pseudo-logits for a feature."""
    k = unique_id % 7
    if which == 0:
        return [round(5 * math.sin(0.37 * i + k), 3) for i in range(length)]
    return [round(5 * math.cos(0.23 * i + 2 * k), 3) for i in range(length)]


def features_digest(features) -> str:
    """sha256 over every field of the features, in order."""
    rows = [[f.unique_id, f.example_index, f.doc_span_index, f.tokens,
             sorted(f.token_to_orig_map.items()),
             sorted((k, bool(v)) for k, v in f.token_is_max_context.items()), f.input_ids,
             f.input_mask, f.segment_ids, f.start_position, f.end_position,
             bool(f.is_impossible)] for f in features]
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


gs = sys.modules[__name__]  # the sample's names, as the generating script used them

EXPECTED = {
    "1.1": {
        "features_train": "e2a89297486726b5d6b78edbcb8a95d355bc2c3c3f68c620da5c15ec8b8028ae",
        "features": "692d5750b1b15874e8f23a34bec94ba2314cf7fa478cfc8c750fc799a69f52c9",
        "predictions": {"p1-who": "Hope",
                        "p1-when": "They settled near the Cape of Good Hope",
                        "p1-where": "(French Protestants)", "p2-year": "mountains",
                        "p2-who": "caf\u00e9 (1895-1943) ran north"},
        "nbest_sha256": "ae59be6d64825d7b31929206b37c464251dc72592163032aae7b18a70e5701c3",
        "predictions_sha256": "5e34cf37ec3e4faa135ebb6e43bc190ce74b72b933440082983a33d48b343fd1",
    },
    "2.0": {
        "features_train": "7f205454746007c7986b3b2f49c81ab026400d6121310cb68ed6aaf5e4d4be4e",
        "features": "bdf625bf324468eabbd7a1b661fde94bf0182ae2f34c874cad6d42c9e3353020",
        "predictions": {"p1-who": "", "p1-when": "They settled near the Cape of Good Hope",
                        "p1-where": "(French Protestants)", "p2-year": "",
                        "p2-who": "caf\u00e9 (1895-1943) ran north",
                        "p2-none": "the Cape. They came abc"},
        "nbest_sha256": "fd53d88eba6b199cf2f82521bcd0b90da13ec9f01b2dfb57d0a324f6088e2fcb",
        "null_odds_sha256": "56abcfba150218ec72d0459d7211562438febc1dcd48523f8fd6688a2f02b8de",
        "predictions_sha256": "6f845a192d1084fc83a1fcae74a440ee3e93766b0918cff1971f3fa4d9007a7b",
    },
}


def _sha(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("version", ["1.1", "2.0"])
def test_same_features_and_files_as_the_original(version, tmp_path):
    v2 = version == "2.0"
    expected = EXPECTED[version]
    vocab = tmp_path / "vocab.txt"
    vocab.write_text(gs.VOCAB_TEXT, encoding="utf-8")
    data_file = tmp_path / "data.json"
    data_file.write_text(json.dumps({"version": "x", "data": gs.data(v2)}))
    tokenizer = FullTokenizer(str(vocab), do_lower_case=True)
    for training in (True, False):
        examples = squad.read_squad_examples(data_file, training, version_2_with_negative=v2)
        features = squad.convert_examples_to_features(examples, tokenizer, gs.MAX_SEQ, gs.STRIDE,
                                                      gs.MAX_QUERY, training, log_examples=0)
        key = "features_train" if training else "features"
        assert gs.features_digest(features) == expected[key], key
    results = [RawResult(f.unique_id, gs.logits(f.unique_id, gs.MAX_SEQ, 0),
                         gs.logits(f.unique_id, gs.MAX_SEQ, 1)) for f in features]
    files = [tmp_path / n for n in ("predictions.json", "nbest_predictions.json",
                                    "null_odds.json")]
    write_predictions(examples, features, results, gs.N_BEST, gs.MAX_ANSWER, True, *files,
                      version_2_with_negative=v2, null_score_diff_threshold=gs.THRESHOLD)
    assert json.loads(files[0].read_text()) == expected["predictions"]
    assert _sha(files[0]) == expected["predictions_sha256"]
    assert _sha(files[1]) == expected["nbest_sha256"]
    if v2:
        assert _sha(files[2]) == expected["null_odds_sha256"]
    else:
        assert not files[2].exists()
