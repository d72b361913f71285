"""A user who predicts repeatedly pays the trace once (issue 35): `predict_arrays` (both the
length-bucketed and the padded path) keeps its `tf.function` with the model, so calls with new
batch sizes, lengths or example counts reuse it; the bucketed outputs equal the padded path's
(logits within 1e-5, the tolerance of tests/tasks/test_length_batching.py)."""
from __future__ import annotations

import gc
import weakref

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.modeling import BertClassifier, BertConfig, BertTokenClassifier
from bert_tf.training.finetuning import predict_arrays
from bert_tf.training.length_batching import cached_model_function

LOGIT_TOLERANCE = 1e-5  # as tests/tasks/test_length_batching.py: float rounding only

TRACES = {"count": 0}  # Python side effect: runs once per trace of a model call


class CountingClassifier(BertClassifier):
    def call(self, inputs, training=None):
        TRACES["count"] += 1
        return super().call(inputs, training=training)


class CountingTokenClassifier(BertTokenClassifier):
    def call(self, inputs, training=None):
        TRACES["count"] += 1
        return super().call(inputs, training=training)


def tiny_config() -> BertConfig:
    return BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=64, max_position_embeddings=64, type_vocab_size=2,
                      hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)


def make(cls):
    keras.utils.set_random_seed(3)
    return cls(tiny_config(), num_labels=3).build_from_config_shapes()


def arrays(n: int, seq: int, seed: int) -> dict[str, np.ndarray]:
    """n examples padded to seq, of random lengths 1..seq."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, seq + 1, size=n)
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int32)
    ids = rng.integers(5, 50, size=(n, seq)).astype(np.int32) * mask
    types = (rng.integers(0, 2, size=(n, seq)) * mask).astype(np.int32)
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}


# (examples, max_seq_length, batch_size) of a user's successive calls.
CALLS = [(37, 32, 8), (5, 32, 8), (20, 48, 16), (3, 16, 2), (37, 32, 8)]


@pytest.mark.parametrize("cls, per_position", [(CountingClassifier, False),
                                                (CountingTokenClassifier, True)])
def test_bucketed_predict_traces_once_and_equals_padded(cls, per_position):
    model = make(cls)
    TRACES["count"] = 0
    results = []
    for call, (n, seq, batch) in enumerate(CALLS):
        inputs = arrays(n, seq, seed=call)
        got = predict_arrays(model, inputs, batch, ["logits"], progress=False)["logits"]
        results.append((inputs, batch, got))
    # One trace for every call: batch and sequence axes are dynamic in the one signature
    # (plus at most one more: Keras may trace the call once to build the output structure).
    assert TRACES["count"] <= 1, TRACES["count"]
    bucketed_traces = TRACES["count"]
    for inputs, batch, got in results:
        want = predict_arrays(model, inputs, batch, ["logits"], progress=False,
                              length_bucketing=False)["logits"]
        assert got.shape == want.shape
        if per_position:  # positions past a batch's padded length are -10000 (documented)
            real = inputs["input_mask"].astype(bool)
            np.testing.assert_allclose(got[real], want[real], rtol=0, atol=LOGIT_TOLERANCE)
        else:
            np.testing.assert_allclose(got, want, rtol=0, atol=LOGIT_TOLERANCE)
    # The padded path: one trace per distinct (batch, seq) shape, none when a shape comes back.
    padded_shapes = {(batch, seq) for _, seq, batch in CALLS}
    assert TRACES["count"] - bucketed_traces <= len(padded_shapes)
    before = TRACES["count"]
    for inputs, batch, got in results:
        again = predict_arrays(model, inputs, batch, ["logits"], progress=False)["logits"]
        np.testing.assert_array_equal(again, got)  # the same graph: the same numbers
        predict_arrays(model, inputs, batch, ["logits"], progress=False, length_bucketing=False)
    assert TRACES["count"] == before


def test_cached_functions_follow_the_model_and_its_variables():
    model = make(CountingClassifier)
    inputs = arrays(9, 16, seed=0)
    TRACES["count"] = 0
    first = predict_arrays(model, inputs, 4, ["logits"], progress=False)["logits"]
    predict_arrays(model, inputs, 4, ["logits"], progress=False)
    assert TRACES["count"] == 1
    # Other outputs are another function; asking for an output the model lacks still fails.
    with pytest.raises(ValueError, match="has no outputs"):
        predict_arrays(model, inputs, 4, ["nope"], progress=False)
    # A second model gets its own function (its own weights), and the cache holds no strong
    # reference to it: a dropped model is freed (built in a helper, so no frame keeps it).
    ref, logits = _predict_with_a_throwaway_model(inputs)
    assert not np.allclose(logits, first)
    gc.collect()
    assert ref() is None


def _predict_with_a_throwaway_model(inputs):
    other = make(CountingClassifier)
    for variable in other.trainable_variables:
        variable.assign(variable * 0.5)
    logits = predict_arrays(other, inputs, 4, ["logits"], progress=False)["logits"]
    return weakref.ref(other), logits


def test_cached_model_function_rebuilds_when_variables_change():
    class Holder(keras.layers.Layer):
        pass

    holder = Holder()
    built = []

    def factory(model_ref):
        built.append(model_ref() is holder)
        return object()

    a = cached_model_function(holder, "k", factory)
    assert cached_model_function(holder, "k", factory) is a
    assert cached_model_function(holder, "other", factory) is not a
    holder.add_weight(shape=(1,), name="w")  # e.g. LoRA adapters: the graph would be stale
    assert cached_model_function(holder, "k", factory) is not a
    assert built == [True, True, True]


@pytest.mark.long  # building a raw-text model traces its tokenizer: ~20 s on 2 cores
def test_text_model_predict_traces_bounded(tmp_path):
    """In-memory texts go through the one function kept with the model (`TextTask.predict_raw`,
    `cached_model_function`): traced once, whatever the number of texts, the batch size or the
    batch's longest text. A dataset keeps Keras' loop, whose `predict_function` Keras keeps on
    the model (reduce_retracing generalises the batch axis): it stays bounded too."""
    import bert_tf
    from bert_tf.checkpoints import save_original_checkpoint
    from bert_tf.modeling import BertEncoder

    words = "the a movie film good bad great awful plot acting was is".split()
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words
    (tmp_path / "vocab.txt").write_text("".join(t + "\n" for t in vocab), encoding="utf-8")
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=32, type_vocab_size=2)
    config.to_json_file(tmp_path / "bert_config.json")
    keras.utils.set_random_seed(0)
    save_original_checkpoint(BertEncoder(config).build_from_config_shapes(),
                             tmp_path / "bert_model.ckpt")
    model = bert_tf.BertTextClassifier.from_pretrained(str(tmp_path), num_classes=2,
                                                       sequence_length=16)
    rng = np.random.default_rng(0)

    def texts(n):
        return [" ".join(rng.choice(words, size=rng.integers(1, 12))) for _ in range(n)]

    first = model.predict(texts(5), batch_size=4)
    model.predict(texts(9), batch_size=4)
    assert model.predict_function is None  # Keras' loop was not used for in-memory texts

    def one_function():
        return cached_model_function(model, ("predict_texts", ()),
                                     lambda _: pytest.fail("the text function was not cached"))

    assert one_function().experimental_get_tracing_count() == 1
    for n, batch in ((3, 4), (11, 8), (5, 4)):
        model.predict(texts(n), batch_size=batch)
    assert one_function().experimental_get_tracing_count() == 1
    assert len(first) == 5

    # A dataset of texts keeps Keras' loop: bounded traces there as well.
    def dataset(n, batch):
        return tf.data.Dataset.from_tensor_slices(texts(n)).batch(batch)

    model.predict(dataset(5, 4), verbose=0)
    model.predict(dataset(9, 4), verbose=0)
    traces = model.predict_function.experimental_get_tracing_count()
    assert traces <= 2, traces
    for n, batch in ((3, 4), (11, 8), (5, 4)):
        model.predict(dataset(n, batch), verbose=0)
    assert model.predict_function.experimental_get_tracing_count() == traces
