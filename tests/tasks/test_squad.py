"""SQuAD reading and features: offsets, sub-token answer mapping, doc strides, max context,
impossible questions, query truncation and bad answers (handmade data and vocab)."""
from __future__ import annotations

import json

import pytest

from bert_tf.tasks import squad
from bert_tf.tokenization import FullTokenizer

WORDS = ("the hu ##gue ##nots ( ) french protestants arrived in 1685 , fleeing persecution . "
         "they settled near cape of good hope who when did where what year come a b c d e f g h "
         "i j k l m n o p q r s t u v w x y z").split()

CONTEXT = ("The Huguenots (French Protestants) arrived in 1685, fleeing persecution. "
           "They settled near the Cape of Good Hope.")


@pytest.fixture()
def tokenizer(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    return FullTokenizer(str(vocab), do_lower_case=True)


def _qa(qid, question, text=None, start=None, impossible=None):
    qa = {"id": qid, "question": question,
          "answers": [] if text is None else [{"text": text, "answer_start": start}]}
    if impossible is not None:
        qa["is_impossible"] = impossible
    return qa


def _data(qas, context=CONTEXT):
    return [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]


def test_split_paragraph_offsets():
    tokens, offsets = squad.split_paragraph(" ab  c\u202Fd\te")
    assert tokens == ["ab", "c", "d", "e"]
    assert offsets == [-1, 0, 0, 0, 0, 1, 1, 2, 2, 3]


def test_read_examples_word_positions(tmp_path):
    path = tmp_path / "train.json"
    qas = [_qa("q1", "who arrived?", "French Protestants", CONTEXT.index("French")),
           _qa("q2", "when did they come?", "1685", CONTEXT.index("1685"))]
    path.write_text(json.dumps({"version": "1.1", "data": _data(qas)}))
    examples = squad.read_squad_examples(path, is_training=True)
    assert [e.qas_id for e in examples] == ["q1", "q2"]
    e1, e2 = examples
    assert e1.doc_tokens[e1.start_position:e1.end_position + 1] == ["(French", "Protestants)"]
    assert e2.doc_tokens[e2.start_position:e2.end_position + 1] == ["1685,"]
    # Without training, answers are not read.
    (p1, _) = squad.read_squad_examples(path, is_training=False)
    assert p1.start_position is None and p1.orig_answer_text is None


def test_answer_mapping_through_sub_tokens_and_punctuation(tokenizer):
    qas = [_qa("q1", "who arrived?", "French Protestants", CONTEXT.index("French")),
           _qa("q2", "when did they come?", "1685", CONTEXT.index("1685")),
           _qa("q3", "who?", "Huguenots", CONTEXT.index("Huguenots"))]
    examples = squad.examples_from_squad_data(_data(qas), is_training=True)
    features = squad.convert_examples_to_features(examples, tokenizer, max_seq_length=64,
                                                  doc_stride=16, max_query_length=16,
                                                  is_training=True)
    assert len(features) == 3  # one window each
    answers = [f.tokens[f.start_position:f.end_position + 1] for f in features]
    assert answers == [["french", "protestants"], ["1685"], ["hu", "##gue", "##nots"]]
    f = features[2]
    # [CLS] who ? [SEP] the hu ##gue ##nots ...: doc tokens map back to their original word.
    assert f.tokens[:6] == ["[CLS]", "who", "[UNK]", "[SEP]", "the", "hu"]
    assert f.segment_ids[:5] == [0, 0, 0, 0, 1]
    assert [f.token_to_orig_map[i] for i in range(4, 10)] == [0, 1, 1, 1, 2, 2]
    assert f.tokens[f.input_mask.index(0) - 1] == "[SEP]"
    assert len(f.input_ids) == len(f.input_mask) == len(f.segment_ids) == 64
    assert [f.unique_id for f in features] == [1000000000, 1000000001, 1000000002]


def test_improve_answer_span(tokenizer):
    doc = ["(", "french", "protestants", ")"]
    assert squad.improve_answer_span(doc, 0, 3, tokenizer, "French Protestants") == (1, 2)
    assert squad.improve_answer_span(doc, 0, 3, tokenizer, "Dutch") == (0, 3)


def test_doc_spans_with_stride():
    spans = squad.make_doc_spans(22, 10, 4)
    assert [(s.start, s.length) for s in spans] == [(0, 10), (4, 10), (8, 10), (12, 10)]
    assert [(s.start, s.length) for s in squad.make_doc_spans(5, 10, 4)] == [(0, 5)]
    # A stride longer than a window advances by the window length only.
    assert [(s.start, s.length) for s in squad.make_doc_spans(7, 3, 5)] == [(0, 3), (3, 3),
                                                                            (6, 1)]


def test_check_is_max_context_original_example():
    # "the man went to the store and bought a gallon of milk": A = 0..4, B = 3..7, C = 6..10.
    spans = [squad.DocSpan(0, 5), squad.DocSpan(3, 5), squad.DocSpan(6, 5)]
    bought = 7
    assert [squad.check_is_max_context(spans, i, bought) for i in range(3)] == [False, False,
                                                                                True]
    assert squad.check_is_max_context(spans, 0, 1)  # only span A holds it
    assert not squad.check_is_max_context(spans, 2, 1)


def test_long_context_multiple_windows(tokenizer):
    # 26 doc sub-tokens, question "when ?" (2 tokens) -> 16 - 2 - 3 = 11 doc tokens per window.
    context = "a b c d e f g h i j k l m n o p q r s t u v w x y z"
    qas = [_qa("q", "when?", "m n", context.index("m n"))]
    examples = squad.examples_from_squad_data(_data(qas, context), is_training=True)
    features = squad.convert_examples_to_features(examples, tokenizer, max_seq_length=16,
                                                  doc_stride=5, max_query_length=8,
                                                  is_training=True)
    # Windows start at 0, 5, 10, 15 (the last reaches the end).
    assert [f.doc_span_index for f in features] == [0, 1, 2, 3]
    assert [f.tokens[4] for f in features] == ["a", "f", "k", "p"]
    positions = [(f.start_position, f.end_position) for f in features]
    # "m n" = doc tokens 12..13: outside window 0 and 3 -> (0, 0); offset 4 = [CLS] q q [SEP].
    assert positions == [(0, 0), (12 - 5 + 4, 13 - 5 + 4), (12 - 10 + 4, 13 - 10 + 4), (0, 0)]
    for f in features:
        assert f.tokens[f.start_position:f.end_position + 1] in (["[CLS]"], ["m", "n"])
    # Each doc token is max-context in exactly one window.
    counts = {}
    for f in features:
        for pos, is_max in f.token_is_max_context.items():
            counts.setdefault(f.token_to_orig_map[pos], 0)
            counts[f.token_to_orig_map[pos]] += int(is_max)
    assert set(counts.values()) == {1} and len(counts) == 26
    # "l" (doc token 11) is in windows 1 (pos 6 of 11) and 2 (pos 1): window 1 is best.
    assert features[1].token_is_max_context[11 - 5 + 4]
    assert not features[2].token_is_max_context[11 - 10 + 4]


def test_query_truncation(tokenizer):
    qas = [_qa("q", "what year did they come where who when", "1685", CONTEXT.index("1685"))]
    examples = squad.examples_from_squad_data(_data(qas), is_training=False)
    (f,) = squad.convert_examples_to_features(examples, tokenizer, 64, 16, 3, False)
    assert f.tokens[:5] == ["[CLS]", "what", "year", "did", "[SEP]"]
    assert f.start_position is None


def test_impossible_questions_v2(tokenizer):
    qas = [_qa("imp", "what year?", None, None, impossible=True),
           _qa("pos", "when?", "1685", CONTEXT.index("1685"), impossible=False)]
    examples = squad.examples_from_squad_data(_data(qas), is_training=True,
                                              version_2_with_negative=True)
    imp = examples[0]
    assert imp.is_impossible and (imp.start_position, imp.end_position) == (-1, -1)
    assert imp.orig_answer_text == ""
    features = squad.convert_examples_to_features(examples, tokenizer, 24, 6, 8, True)
    imp_features = [f for f in features if f.example_index == 0]
    assert len(imp_features) > 1
    assert all((f.start_position, f.end_position) == (0, 0) and f.is_impossible
               for f in imp_features)
    pos_features = [f for f in features if f.example_index == 1]
    assert not any(f.is_impossible for f in pos_features)
    assert any(f.start_position > 0 for f in pos_features)


def test_bad_answer_skipped_with_qid_or_raised(caplog):
    qas = [_qa("good", "when?", "1685", CONTEXT.index("1685")),
           _qa("bad-qid-7", "who?", "Dutch settlers", CONTEXT.index("French"))]
    with caplog.at_level("WARNING"):
        examples = squad.examples_from_squad_data(_data(qas), is_training=True,
                                                  source="train.json")
    assert [e.qas_id for e in examples] == ["good"]
    with pytest.raises(squad.SquadDataError, match=r"train\.json.*bad-qid-7.*Dutch settlers"):
        squad.examples_from_squad_data(_data(qas), is_training=True, on_bad_answer="raise",
                                       source="train.json")
    # Out-of-range answer_start is a bad answer too (an IndexError in the original).
    with pytest.raises(squad.SquadDataError, match="far.*does not lie inside"):
        squad.examples_from_squad_data(_data([_qa("far", "?", "x", 10_000)]), True,
                                       on_bad_answer="raise")
    # Only bad answers: nothing to train on.
    with pytest.raises(squad.SquadDataError, match="none of the 1 training questions"):
        squad.examples_from_squad_data(_data(qas[1:]), is_training=True)
    # Prediction does not look at answers.
    assert len(squad.examples_from_squad_data(_data(qas), is_training=False)) == 2


def test_training_needs_exactly_one_answer():
    qa = _qa("multi", "when?", "1685", CONTEXT.index("1685"))
    qa["answers"] = qa["answers"] * 2
    with pytest.raises(squad.SquadDataError, match="multi.*2 answers"):
        squad.examples_from_squad_data(_data([qa]), is_training=True)


def test_malformed_file_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(squad.SquadDataError, match="bad.json.*not valid JSON"):
        squad.read_squad_examples(bad, is_training=False)
    bad.write_text(json.dumps({"version": "1.1"}))
    with pytest.raises(squad.SquadDataError, match="no 'data' list"):
        squad.read_squad_examples(bad, is_training=False)


def test_length_flag_checks(tokenizer):
    with pytest.raises(ValueError, match=r"max_seq_length \(10\).*max_query_length \(8\)"):
        squad.check_lengths(10, 8, 4)
    opts = squad.SquadRunOptions(bert_config_file="c", vocab_file="v", output_dir="o",
                                 do_train=True)
    with pytest.raises(ValueError, match="train_file"):
        squad.validate_options(opts)
    with pytest.raises(ValueError, match="At least one"):
        squad.validate_options(squad.SquadRunOptions("c", "v", "o"))


def test_features_to_arrays(tokenizer):
    qas = [_qa("q", "when?", "1685", CONTEXT.index("1685"))]
    examples = squad.examples_from_squad_data(_data(qas), is_training=True)
    features = squad.convert_examples_to_features(examples, tokenizer, 32, 8, 8, True)
    arrays = squad.features_to_arrays(features, is_training=True)
    assert arrays["input_word_ids"].shape == (len(features), 32)
    assert arrays["input_word_ids"].dtype.name == "int32"
    assert list(arrays["start_positions"]) == [f.start_position for f in features]


def test_squad_loss_is_mean_of_start_and_end_cross_entropy():
    import numpy as np

    rng = np.random.default_rng(0)
    start, end = rng.normal(size=(3, 7)).astype("float32"), rng.normal(size=(3, 7)).astype(
        "float32")
    sp, ep = np.array([0, 3, 6]), np.array([1, 3, 0])

    def ce(logits, pos):
        log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        return -log_probs[np.arange(len(pos)), pos].mean()

    loss = float(squad.squad_loss(start, end, sp, ep))
    assert loss == pytest.approx((ce(start, sp) + ce(end, ep)) / 2, rel=1e-5)
