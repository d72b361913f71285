"""Task-model serving wrappers on a tiny random model (2 layers, hidden 32), eagerly: outputs
equal the Keras model's, the SQuAD best span equals a brute-force search with the original's
limits, NER word starts follow the tokenizer's words, regression and label checks."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.export.preprocessor import BertPreprocessor
from bert_tf.export.task_models import (ClassifierExport, MultipleChoiceExport, SquadExport,
                                        TokenClassifierExport)
from bert_tf.modeling import (BertClassifier, BertConfig, BertMultipleChoice, BertSpanLabeler,
                              BertTokenClassifier)
from bert_tf.tokenization import FullTokenizer

WORDS = ["the", "cat", "sat", "on", "mat", "un", "##aff", "##able", "dog", "a", ",", "."]
TEXTS = ["The cat sat on the mat.", "unaffable dog", "", "a cat , a dog , a mat " * 4]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    vocab = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS) + "\n",
                     encoding="utf-8")
    config = BertConfig(vocab_size=5 + len(WORDS), hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64)
    return str(vocab), config, BertPreprocessor(str(vocab), 12)


def test_classifier_outputs_and_labels(setup):
    vocab, config, pre = setup
    model = BertClassifier(config, num_labels=3).build_from_config_shapes()
    export = ClassifierExport(model, pre, ["a", "b", "c"])
    out = export.outputs(pre.pack_single(tf.constant(TEXTS)))
    logits = model(pre.pack_single(tf.constant(TEXTS)), training=False)["logits"]
    np.testing.assert_allclose(out["logits"], logits, atol=1e-6)
    np.testing.assert_allclose(out["probabilities"], tf.nn.softmax(logits), atol=1e-6)
    assert out["label_ids"].numpy().tolist() == np.argmax(logits, -1).tolist()
    assert out["labels"].numpy().tolist() == [b"abc"[i:i + 1] for i in out["label_ids"].numpy()]
    with pytest.raises(ValueError, match="3 labels .* num_labels=2"):
        ClassifierExport(BertClassifier(config, num_labels=2).build_from_config_shapes(), pre,
                         ["a", "b", "c"])
    regression = ClassifierExport(BertClassifier(config, num_labels=1).build_from_config_shapes(),
                                  pre)
    out = regression.outputs(pre.pack_single(tf.constant(TEXTS)))
    assert set(out) == {"predictions", "logits"} and out["predictions"].shape == (len(TEXTS),)


@pytest.mark.long
def test_squad_best_span_is_the_constrained_argmax(setup):
    vocab, config, pre = setup
    export = SquadExport(BertSpanLabeler(config).build_from_config_shapes(), pre,
                         max_query_length=3, max_answer_length=3)
    questions = ["the cat sat on the mat", "dog", "a", ""]
    contexts = ["unaffable dog sat on a mat", "the cat , the dog .", "", "a cat"]
    out = export.from_text(tf.constant(questions), tf.constant(contexts))
    tokenizer = FullTokenizer(vocab)
    for i, (q, c) in enumerate(zip(questions, contexts)):
        q_ids = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(q))[:3]
        c_ids = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(c))[:12 - 3 - len(q_ids)]
        expected_ids = [2] + q_ids + [3] + c_ids + [3]
        assert out["input_word_ids"][i].numpy().tolist()[:len(expected_ids)] == expected_ids
        first = len(q_ids) + 2
        start, end = out["start_logits"][i].numpy(), out["end_logits"][i].numpy()
        best, best_span = -np.inf, (0, 0)
        for s in range(first, first + len(c_ids)):
            for e in range(s, min(s + 3, first + len(c_ids))):
                if start[s] + end[e] > best:
                    best, best_span = start[s] + end[e], (s, e)
        assert (out["start_index"][i], out["end_index"][i]) == best_span, (q, c)
    with pytest.raises(ValueError, match="leaves no room"):
        SquadExport(BertSpanLabeler(config).build_from_config_shapes(), pre, max_query_length=10)


def test_ner_word_start_mask(setup):
    vocab, config, pre = setup
    export = TokenClassifierExport(BertTokenClassifier(config, num_labels=3)
                                   .build_from_config_shapes(), pre, ["O", "B", "I"])
    out = export.from_text(tf.constant(TEXTS))
    tokenizer = FullTokenizer(vocab)
    for i, text in enumerate(TEXTS):
        starts = [0]
        for word in tokenizer.basic_tokenizer.tokenize(text):
            pieces = tokenizer.wordpiece_tokenizer.tokenize(word)
            starts += [1] + [0] * (len(pieces) - 1)
        starts = starts[:11] + [0]
        expected = (starts + [0] * 12)[:12]
        assert out["word_start_mask"][i].numpy().tolist() == expected, text
    assert out["labels"].shape == (len(TEXTS), 12) and out["probabilities"].shape == (4, 12, 3)


@pytest.mark.long
def test_multiple_choice_packs_each_choice_as_a_pair(setup):
    vocab, config, pre = setup
    model = BertMultipleChoice(config, num_choices=2).build_from_config_shapes()
    export = MultipleChoiceExport(model, pre)
    contexts = tf.constant(["the cat sat", "a dog"])
    choices = tf.constant([["on the mat .", "un"], ["dog", "the mat , the cat"]])
    out = export.from_text(contexts, choices)
    inputs = pre.pack_pair(tf.constant(["the cat sat"] * 2 + ["a dog"] * 2),
                           tf.reshape(choices, [-1]))
    logits = model({k: tf.reshape(v, [2, 2, 12]) for k, v in inputs.items()},
                   training=False)["logits"]
    np.testing.assert_allclose(out["logits"], logits, atol=1e-6)
    assert out["label_ids"].shape == (2,)


@pytest.mark.long
def test_example_level_exports_run_on_the_cut_batch(setup):
    """Classifier and multiple-choice signatures cut the packed request to its longest example
    (rounded up to 8): the model sees 8 columns instead of 64, the logits equal the model at full
    length, also when one example is longer than the others."""
    vocab, config, _ = setup
    pre = BertPreprocessor(vocab, 64)
    seen = []

    def spy(export):
        model = export._model  # noqa: SLF001

        def call(inputs, training=False):
            seen.append(int(inputs["input_mask"].shape[-1]))
            return model(inputs, training=training)
        export.__dict__["_model"] = call
        return model

    texts = tf.constant(["The cat sat on the mat.", "unaffable dog", ""])
    export = ClassifierExport(BertClassifier(config, num_labels=3).build_from_config_shapes(), pre)
    model = spy(export)
    for batch, length in ((texts, 16), (tf.concat([texts, ["a cat , a dog " * 3]], 0), 24)):
        packed = pre.pack_single(batch)
        out = export.outputs(packed)
        assert seen[-1] == length
        np.testing.assert_allclose(out["logits"], model(packed, training=False)["logits"],
                                   atol=1e-5)

    mc = MultipleChoiceExport(BertMultipleChoice(config, num_choices=2)
                              .build_from_config_shapes(), pre)
    model = spy(mc)
    choices = tf.constant([["on the mat .", "un"], ["dog", "the mat , the cat"]])
    out = mc.from_text(tf.constant(["the cat sat", "a dog"]), choices)
    assert seen[-1] == 16
    inputs = pre.pack_pair(tf.constant(["the cat sat"] * 2 + ["a dog"] * 2),
                           tf.reshape(choices, [-1]))
    full = model({k: tf.reshape(v, [2, 2, 64]) for k, v in inputs.items()}, training=False)
    np.testing.assert_allclose(out["logits"], full["logits"], atol=1e-5)
