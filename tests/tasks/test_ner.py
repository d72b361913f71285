"""CoNLL-2003 NER: reading the column files, first-sub-token labels and ignored positions (checked
position by position on a handmade sentence), long-sentence windows, the masked loss, mapping
predictions back to words, the conlleval file, bad input, and the real CoNLL-2003 files."""
from __future__ import annotations

import numpy as np
import pytest

from bert_tf.evaluation import conlleval
from bert_tf.tasks import ner
from bert_tf.tokenization import FullTokenizer

IGN = ner.IGNORE_LABEL
WORDS = "eu reject ##s hu ##gue ##nots 1996 - 08 . john smith lives in paris".split()

CONLL_TEXT = """-DOCSTART- -X- -X- O

EU NNP I-NP I-ORG
rejects VBZ I-VP O
Huguenots NNP I-NP I-MISC
1996-08 CD I-NP O
. . O O

John NNP I-NP I-PER
Smith NNP I-NP I-PER
\u200b NNP I-NP O

-DOCSTART- -X- -X- O

Paris NNP I-NP I-LOC
"""


@pytest.fixture()
def tokenizer(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    return FullTokenizer(str(vocab), do_lower_case=True)


@pytest.fixture()
def conll_file(tmp_path):
    path = tmp_path / "sample.conll"
    path.write_text(CONLL_TEXT, encoding="utf-8")
    return path


def test_read_conll_file(conll_file):
    sentences = ner.read_conll_file(conll_file)
    assert [s.words for s in sentences] == [
        ["EU", "rejects", "Huguenots", "1996-08", "."], ["John", "Smith", "\u200b"], ["Paris"]]
    assert [s.labels for s in sentences] == [
        ["I-ORG", "O", "I-MISC", "O", "O"], ["I-PER", "I-PER", "O"], ["I-LOC"]]
    assert [s.lines for s in sentences] == [[3, 4, 5, 6, 7], [9, 10, 11], [15]]
    assert [s.doc_index for s in sentences] == [0, 0, 1]
    assert sentences[0].source == str(conll_file)


def test_first_sub_token_labels_and_ignored_positions(conll_file, tokenizer):
    sentences = ner.read_conll_file(conll_file)
    labels = list(ner.CONLL2003_LABELS)
    features = ner.convert_sentences_to_features(sentences, tokenizer, labels,
                                                 max_seq_length=16, doc_stride=8)
    assert [f.sentence_index for f in features] == [0, 1, 2]
    f = features[0]
    assert f.tokens == ["[CLS]", "eu", "reject", "##s", "hu", "##gue", "##nots", "1996", "-",
                        "08", ".", "[SEP]"]
    i = labels.index
    assert f.label_ids == [IGN, i("I-ORG"), i("O"), IGN, i("I-MISC"), IGN, IGN, i("O"), IGN, IGN,
                           i("O"), IGN] + [IGN] * 4
    assert f.word_index == [-1, 0, 1, -1, 2, -1, -1, 3, -1, -1, 4, -1] + [-1] * 4
    assert f.predict_mask == [0, 1, 1, 0, 1, 0, 0, 1, 0, 0, 1, 0] + [0] * 4
    assert f.input_mask == [1] * 12 + [0] * 4
    assert f.segment_ids == [0] * 16
    assert f.input_ids[:3] == [2, 5, 6] and f.input_ids[12:] == [0] * 4
    # A word WordPiece turns into nothing (U+200B) is fed as [UNK] and keeps its label.
    g = features[1]
    assert g.tokens == ["[CLS]", "john", "smith", "[UNK]", "[SEP]"]
    assert g.label_ids[:5] == [IGN, i("I-PER"), i("I-PER"), i("O"), IGN]
    arrays = ner.features_to_arrays(features)
    assert set(arrays) == {"input_word_ids", "input_mask", "input_type_ids", "label_ids",
                           "predict_mask"}
    assert all(a.shape == (3, 16) and a.dtype == np.int32 for a in arrays.values())
    # Without a label list (prediction of untagged text) every position is ignored.
    unlabelled = ner.convert_sentences_to_features(sentences, tokenizer, None, 16, 8)
    assert all(x == IGN for u in unlabelled for x in u.label_ids)
    assert unlabelled[0].predict_mask == f.predict_mask


def test_long_sentence_windows_cover_every_word_once(tokenizer, tmp_path):
    words = ["Huguenots", "John", "Smith", "lives", "in", "Paris", "EU", "rejects", "."]
    tags = ["I-MISC", "I-PER", "I-PER", "O", "O", "I-LOC", "I-ORG", "O", "O"]
    sentence = ner.NerSentence(words=words, labels=tags, lines=list(range(1, 10)))
    labels = list(ner.CONLL2003_LABELS)
    # 12 sub-tokens, 6 per window (max_seq_length 8), a window every 3: 0-5, 3-8, 6-11.
    features = ner.convert_sentences_to_features([sentence], tokenizer, labels,
                                                 max_seq_length=8, doc_stride=3)
    assert [f.window_index for f in features] == [0, 1, 2]
    assert all(len(f.tokens) <= 8 for f in features)
    predicted_from = {}
    for f in features:
        for pos, (w, use) in enumerate(zip(f.word_index, f.predict_mask)):
            if use:
                assert w not in predicted_from, "a word is predicted from two windows"
                predicted_from[w] = f.window_index
            if w >= 0:  # every first sub-token of a window is trained on
                assert f.label_ids[pos] == labels.index(tags[w])
    assert sorted(predicted_from) == list(range(len(words)))
    # Max context: "huguenots" (sub-token 0) and "rejects" (9) are each in one window only;
    # "lives" (5) is at the edge of window 0 and central in window 1; "paris" (7) has the same
    # context in windows 1 and 2 and goes to the first.
    assert predicted_from == {0: 0, 1: 0, 2: 0, 3: 1, 4: 1, 5: 1, 6: 2, 7: 2, 8: 2}
    # Oracle logits give back the gold tags, word by word.
    ids = np.array([[max(x, 0) for x in f.label_ids] for f in features])
    assert ner.word_predictions(features, ids, [sentence], labels) == [tags]


def test_document_context_windows(tokenizer, tmp_path):
    path = tmp_path / "docs.conll"
    path.write_text("-DOCSTART- -X- -X- O\n\nEU NNP I-NP I-ORG\nrejects VBZ I-VP O\n\n"
                    "John NNP I-NP I-PER\n\nParis NNP I-NP I-LOC\n.  . O O\n\n"
                    "-DOCSTART- -X- -X- O\n\nSmith NNP I-NP I-PER\n", encoding="utf-8")
    sentences = ner.read_conll_file(path)
    labels = list(ner.CONLL2003_LABELS)
    i = labels.index
    # Document 0 is "eu reject ##s | john | paris ." (6 sub-tokens); windows hold 4.
    features = ner.convert_sentences_to_features(sentences, tokenizer, labels, max_seq_length=6,
                                                 doc_stride=2, document_context=True)
    assert [f.tokens for f in features] == [
        ["[CLS]", "eu", "reject", "##s", "john", "[SEP]"],  # no left context: all on the right
        ["[CLS]", "##s", "john", "paris", ".", "[SEP]"],  # centred (the odd token: right)
        ["[CLS]", "##s", "john", "paris", ".", "[SEP]"],  # no right context: all on the left
        ["[CLS]", "smith", "[SEP]"]]  # its own document only
    assert [f.label_ids for f in features] == [
        [IGN, i("I-ORG"), i("O"), IGN, IGN, IGN], [IGN, IGN, i("I-PER"), IGN, IGN, IGN],
        [IGN, IGN, IGN, i("I-LOC"), i("O"), IGN], [IGN, i("I-PER"), IGN, IGN, IGN, IGN]]
    assert [f.word_index for f in features] == [
        [-1, 0, 1, -1, -1, -1], [-1, -1, 0, -1, -1, -1], [-1, -1, -1, 0, 1, -1],
        [-1, 0, -1, -1, -1, -1]]
    assert [f.predict_mask for f in features] == [
        [0, 1, 1, 0, 0, 0], [0, 0, 1, 0, 0, 0], [0, 0, 0, 1, 1, 0], [0, 1, 0, 0, 0, 0]]
    assert features[3].input_mask == [1, 1, 1, 0, 0, 0]
    ids = np.array([[max(x, 0) for x in f.label_ids] for f in features])
    assert ner.word_predictions(features, ids, sentences, labels) == [s.labels for s in sentences]
    # A sentence longer than the window is split as without context.
    split = ner.convert_sentences_to_features(sentences[:1], tokenizer, labels, max_seq_length=4,
                                              doc_stride=1, document_context=True)
    assert [f.tokens for f in split] == [["[CLS]", "eu", "reject", "[SEP]"],
                                         ["[CLS]", "reject", "##s", "[SEP]"]]
    assert ner.document_context_window(10, 4, 100, 10) == (7, 17)
    assert ner.document_context_window(1, 4, 100, 10) == (0, 10)
    assert ner.document_context_window(10, 4, 15, 10) == (5, 15)
    assert ner.document_context_window(2, 4, 7, 10) == (0, 7)


def test_token_loss_ignores_unlabelled_positions():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 5, 4)).astype(np.float32)
    label_ids = np.array([[IGN, 1, IGN, 3, IGN], [IGN, 0, 2, IGN, IGN]], np.int32)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -np.mean([log_probs[0, 1, 1], log_probs[0, 3, 3], log_probs[1, 1, 0],
                         log_probs[1, 2, 2]])
    loss = float(ner.token_classification_loss(logits, label_ids))
    assert loss == pytest.approx(expected, rel=1e-5)
    assert ner.numpy_token_loss(logits, label_ids) == pytest.approx(expected, rel=1e-5)
    changed = logits.copy()
    changed[label_ids < 0] += 100.0 * rng.normal(size=changed[label_ids < 0].shape)
    assert float(ner.token_classification_loss(changed, label_ids)) == pytest.approx(loss,
                                                                                   rel=1e-5)
    assert float(ner.token_classification_loss(logits, np.full_like(label_ids, IGN))) == 0.0


def test_conlleval_file_and_scores(conll_file, tmp_path):
    sentences = ner.read_conll_file(conll_file)
    predictions = [["I-ORG", "O", "O", "O", "O"], ["I-PER", "I-PER", "O"], ["I-ORG"]]
    out = tmp_path / "predictions.txt"
    ner.write_conlleval_file(out, sentences, predictions)
    assert out.read_text(encoding="utf-8") == (
        "EU I-ORG I-ORG\nrejects O O\nHuguenots I-MISC O\n1996-08 O O\n. O O\n\n"
        "John I-PER I-PER\nSmith I-PER I-PER\n\u200b O O\n\nParis I-LOC I-ORG\n\n")
    result = ner.score_predictions(sentences, predictions)
    # 4 gold entities (ORG, MISC, PER, LOC); 3 predicted (ORG, PER, ORG); 2 correct.
    assert (result.overall.found_gold, result.overall.found_guessed,
            result.overall.correct) == (4, 3, 2)
    assert result.precision == pytest.approx(200 / 3) and result.recall == 50.0
    # conlleval reads the file back to the same counts.
    again = conlleval.evaluate_sentences(conlleval.read_conlleval_file(out))
    assert again.as_dict() == result.as_dict()
    # Without gold tags: token and prediction only.
    untagged = [ner.NerSentence(words=["Paris"], labels=None, lines=[1])]
    ner.write_conlleval_file(out, untagged, [["I-LOC"]])
    assert out.read_text(encoding="utf-8") == "Paris I-LOC\n\n"


def test_label_list(tmp_path, conll_file):
    sentences = ner.read_conll_file(conll_file)
    assert ner.build_label_list(sentences) == list(ner.CONLL2003_LABELS)
    sentences[0].labels[1] = "B-DATE"  # not a CoNLL-2003 tag: an error naming file and line
    with pytest.raises(ner.NerDataError, match=rf"{conll_file}:\d+: unknown tag 'B-DATE'"):
        ner.build_label_list(sentences)
    labels = ner.build_label_list(sentences, tag_set=[*ner.CONLL2003_LABELS, "B-DATE"])
    assert labels == [*ner.CONLL2003_LABELS, "B-DATE"]
    path = tmp_path / "label_list.txt"
    ner.write_label_list(path, labels)
    assert ner.read_label_list(path) == labels


def test_bad_input_names_file_and_line(tmp_path, conll_file):
    bad = tmp_path / "bad.conll"
    bad.write_text("EU NNP I-NP I-ORG\nrejects VBZ O\n", encoding="utf-8")
    with pytest.raises(ner.NerDataError, match=r"bad\.conll:2: 3 columns, expected 4"):
        ner.read_conll_file(bad)
    bad.write_bytes(b"EU NNP I-NP I-ORG\n\xff NNP I-NP O\n")
    with pytest.raises(ner.NerDataError, match=r"bad\.conll:2: not valid UTF-8"):
        ner.read_conll_file(bad)
    bad.write_text("EU\nrejects\n", encoding="utf-8")
    with pytest.raises(ner.NerDataError, match=r"bad\.conll:1: expected a token and its tag"):
        ner.read_conll_file(bad)
    assert ner.read_conll_file(bad, require_labels=False)[0].labels is None
    bad.write_text("\ufeffEU NNP I-NP I-ORG\n", encoding="utf-8")  # a leading BOM is dropped
    assert ner.read_conll_file(bad)[0].words == ["EU"]
    bad.write_text("-DOCSTART- -X- -X- O\n\n", encoding="utf-8")
    with pytest.raises(ner.NerDataError, match="no sentences"):
        ner.read_conll_file(bad)
    with pytest.raises(ner.NerDataError, match="cannot read CoNLL file"):
        ner.read_conll_file(tmp_path / "missing.conll")
    sentences = ner.read_conll_file(conll_file)
    sentences[1].labels[2] = "I-DATE"
    with pytest.raises(ner.NerDataError, match=r"sample\.conll:11: unknown tag 'I-DATE'"):
        ner.check_labels(sentences, ner.CONLL2003_LABELS)


def test_real_conll2003_files(shared_data):
    folder = shared_data / "conll2003"
    train = ner.read_conll_file(folder / "eng.train")
    dev = ner.read_conll_file(folder / "eng.testa")
    assert (len(train), len(dev)) == (14041, 3250)  # data/README.md
    assert (train[-1].doc_index + 1, dev[-1].doc_index + 1) == (946, 216)
    assert train[0].words == ["EU", "rejects", "German", "call", "to", "boycott", "British",
                              "lamb", "."]
    assert train[0].labels == ["I-ORG", "O", "I-MISC", "O", "O", "O", "I-MISC", "O", "O"]
    assert train[0].lines == list(range(3, 12))
    # IOB1: B- tags only where two entities of one type touch; every tag is a CoNLL-2003 tag.
    assert ner.build_label_list(train) == list(ner.CONLL2003_LABELS)
    ner.check_labels(dev, ner.CONLL2003_LABELS)
    tags = [t for s in train for t in s.labels]
    assert tags.count("B-LOC") == 11 and tags.count("I-PER") == 11128
