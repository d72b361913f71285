"""GptModel's token-id check: ids outside [0, n_vocab + n_special) (special rows are tokens,
position rows are not) -> one line naming the id and the range, eagerly and in inference
graphs; a training graph gets no extra op; the generator and scorer refuse such ids and
too-long prompts at their boundary."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.errors import UserInputError


@pytest.fixture(scope="module")
def model():
    import keras

    from bert_tf.gpt.config import GptConfig
    from bert_tf.gpt.model import GptModel
    keras.utils.set_random_seed(1)
    config = GptConfig(n_vocab=40, n_special=3, n_ctx=8, n_embd=16, n_head=2, n_layer=1)
    return GptModel(config)


@pytest.mark.parametrize("bad", [43, 50, 5000, -1])  # first position row, a later one, past
def test_eager_call_names_the_bad_id_and_the_range(model, bad):
    ids = np.array([[1, 2, 42, 3], [4, 5, bad, 6]], np.int32)
    with pytest.raises(UserInputError) as raised:
        model({"token_ids": ids}, training=False)
    message = str(raised.value)
    assert f"token id {bad} at [1, 2] is outside [0, 43)" in message
    assert "\n" not in message
    model({"token_ids": ids[:1]}, training=False)  # special tokens (40..42) are tokens


def test_inference_graph_asserts_training_graph_adds_nothing(model):
    spec = tf.TensorSpec([None, None], tf.int32)

    @tf.function(input_signature=[spec])
    def infer(ids):
        return model({"token_ids": ids}, training=False)["hidden_states"]

    with pytest.raises(tf.errors.InvalidArgumentError, match=r"token id.*\b5000\b.*outside "
                                                              r"\[0, 43\)"):
        infer(tf.constant([[1, 5000]]))
    assert infer(tf.constant([[1, 42]])).shape == (1, 2, 16)

    def ops(training):  # a known length: no n_ctx assertion either
        fn = tf.function(lambda ids: model({"token_ids": ids}, training=training)["lm_logits"])
        graph = fn.get_concrete_function(tf.TensorSpec([None, 4], tf.int32)).graph
        return {op.type for op in graph.get_operations()}

    assert "Assert" in ops(False)
    assert "Assert" not in ops(True)


def test_xla_inference_compiles_with_the_check(model):
    fn = tf.function(lambda ids: model({"token_ids": ids}, training=False)["hidden_states"],
                     jit_compile=True)
    expected = model({"token_ids": np.array([[1, 2, 3]], np.int32)}, training=False)
    np.testing.assert_allclose(fn(tf.constant([[1, 2, 3]])), expected["hidden_states"],
                               atol=1e-5)


def test_generator_and_scorer_refuse_bad_ids_and_long_prompts(model):
    from bert_tf.gpt.generation import GptGenerator
    generator = GptGenerator(model, jit_compile=False)
    with pytest.raises(UserInputError, match=r"^prompt 1: id 45 is outside \[0, 43\)"):
        generator.generate([[1], [2, 45]], max_new_tokens=1)
    with pytest.raises(UserInputError, match=r"^sequence 0: id 5000 is outside \[0, 43\)"):
        generator.score([[1, 5000]])
    with pytest.raises(UserInputError, match=r"^prompt 0 has 8 tokens; at most 7 fit \(n_ctx 8"):
        generator.generate([[1] * 8], max_new_tokens=1)
    with pytest.raises(UserInputError, match=r"^sequence 0 has 9 tokens; at most 8 fit"):
        generator.score([[1] * 9])
