"""SWAG multiple choice: reading the swagaf csv layout (the handmade sample in
tests/tasks/data/swag), packing `[CLS] sent1 [SEP] sent2 ending [SEP]` with the original pair truncation, the loss,
accuracy, the predictions file and bad input."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

from bert_tf.tasks import multiple_choice as mc
from bert_tf.tokenization import FullTokenizer

DATA = pathlib.Path(__file__).resolve().parent / "data" / "swag"
WORDS = "she opens the fridge and takes out a bottle of milk . pours into glass he".split()


@pytest.fixture()
def tokenizer(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    return FullTokenizer(str(vocab), do_lower_case=True)


def test_read_sample_files():
    train = mc.read_swag_examples(DATA / "train.csv", require_label=True)
    assert len(train) == 16
    assert [e.label for e in train] == [0, 1, 2, 3] * 4
    first = train[0]
    assert first.example_id == "0" and first.line == 2
    assert first.context_sentence == "She opens the fridge and takes out a bottle of milk."
    assert first.start_ending == "She"
    assert first.endings[2] == "sings to the dog, then falls asleep."  # quoted field with a comma
    assert first.choice_texts()[0] == "She pours the milk into a glass."
    assert train[2].start_ending == "The girl"
    test = mc.read_swag_examples(DATA / "test.csv", require_label=False)
    assert [e.example_id for e in test] == ["200", "201"] and test[0].label is None
    with pytest.raises(mc.SwagDataError, match=r"test\.csv:1: no `label` column"):
        mc.read_swag_examples(DATA / "test.csv", require_label=True)


def test_pack_choices(tokenizer):
    example = mc.SwagExample("7", "She opens the fridge.", "She", ["pours milk .", "he", "a",
                                                                   "glass and milk ."], label=3)
    arrays = mc.convert_examples_to_features([example], tokenizer, max_seq_length=12)
    assert arrays["input_word_ids"].shape == (1, 4, 12)
    assert arrays["labels"].tolist() == [3]
    inv = {i: t for t, i in tokenizer.vocab.items()}
    tokens = [inv[i] for i, m in zip(arrays["input_word_ids"][0, 0], arrays["input_mask"][0, 0])
              if m]
    assert tokens == ["[CLS]", "she", "opens", "the", "fridge", ".", "[SEP]", "she", "pours",
                      "milk", ".", "[SEP]"]
    assert arrays["input_type_ids"][0, 0].tolist() == [0] * 7 + [1] * 5
    short = [inv[i] for i, m in zip(arrays["input_word_ids"][0, 1], arrays["input_mask"][0, 1])
             if m]
    assert short == ["[CLS]", "she", "opens", "the", "fridge", ".", "[SEP]", "she", "he",
                     "[SEP]"]
    assert arrays["input_mask"][0, 1].tolist() == [1] * 10 + [0] * 2
    # 5 + 5 tokens do not fit 12 - 3: the longer segment loses its last token first (B on a
    # tie), as the original truncate_seq_pair.
    long = [inv[i] for i in arrays["input_word_ids"][0, 3]]
    assert long == ["[CLS]", "she", "opens", "the", "fridge", ".", "[SEP]", "she", "glass", "and",
                    "milk", "[SEP]"]
    example.context_sentence = "She opens the fridge and takes out a bottle of milk."
    arrays = mc.convert_examples_to_features([example], tokenizer, max_seq_length=12)
    # 12 + 5 tokens: the context is cut to 5, then the tie again cuts the ending.
    long = [inv[i] for i in arrays["input_word_ids"][0, 3]]
    assert long == ["[CLS]", "she", "opens", "the", "fridge", "and", "[SEP]", "she", "glass",
                    "and", "milk", "[SEP]"]


def test_loss_accuracy_and_predictions_file(tmp_path):
    logits = np.array([[2.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0], [1.0, 3.0, 0.0, 0.0]],
                      np.float32)
    labels = np.array([0, 3, 0], np.int32)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -np.mean(log_probs[np.arange(3), labels])
    assert float(mc.multiple_choice_loss(logits, labels)) == pytest.approx(expected, rel=1e-6)
    scores = mc.evaluate_logits(logits, labels)
    assert scores["accuracy"] == pytest.approx(2 / 3)
    assert scores["loss"] == pytest.approx(expected, rel=1e-6)
    examples = [mc.SwagExample(str(i), "c", "s", ["a"] * 4, label=int(l) if i < 2 else None)
                for i, l in enumerate(labels)]
    out = tmp_path / "predictions.tsv"
    mc.write_predictions(out, examples, logits)
    lines = out.read_text().splitlines()
    assert lines[0] == "id\tprediction\tlabel\tprob0\tprob1\tprob2\tprob3"
    row = lines[1].split("\t")
    assert row[:3] == ["0", "0", "0"]
    assert sum(float(x) for x in row[3:]) == pytest.approx(1.0, abs=1e-5)
    assert lines[3].split("\t")[:3] == ["2", "1", ""]


def test_bad_input_names_file_and_line(tmp_path):
    header = ",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2," \
             "ending3,label\n"
    row = "0,v,1,A b. C,A b.,C,gold,e0,e1,e2,e3,{label}\n"
    path = tmp_path / "bad.csv"
    path.write_text(header + row.format(label=1) + row.format(label=4))
    with pytest.raises(mc.SwagDataError, match=r"bad\.csv:3: label '4' is not one of 0\.\.3"):
        mc.read_swag_examples(path, require_label=True)
    path.write_text(header + row.format(label=1) + "0,v,1,A b. C,A b.,C,gold,e0,e1\n")
    with pytest.raises(mc.SwagDataError, match=r"bad\.csv:3: 9 fields, the header has 12"):
        mc.read_swag_examples(path, require_label=True)
    path.write_text(header.replace("ending3", "ending_3") + row.format(label=1))
    with pytest.raises(mc.SwagDataError, match=r"bad\.csv:1: the header lacks ending3"):
        mc.read_swag_examples(path, require_label=False)
    path.write_text("\ufeff" + header + "7" + row.format(label=2)[1:])  # a BOM is dropped
    assert mc.read_swag_examples(path, require_label=True)[0].example_id == "7"
    path.write_text(header)
    with pytest.raises(mc.SwagDataError, match="no rows after the header"):
        mc.read_swag_examples(path, require_label=False)
    # A quoted field spanning two lines: errors still name the row's first line.
    path.write_text(header + '0,v,1,"A\nb. C",A b.,C,gold,e0,e1,e2,e3,1\n' + row.format(label=9))
    with pytest.raises(mc.SwagDataError, match=r"bad\.csv:4: label '9'"):
        mc.read_swag_examples(path, require_label=True)
