"""The paper's input transformations and the GptClassifier task model."""
from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.errors import UserInputError
from bert_tf.gpt.config import GptConfig
from bert_tf.gpt.input_transforms import (SpecialTokens, classification_inputs, entailment_inputs,
                                          multiple_choice_inputs, roc_max_len, similarity_inputs)

SPECIAL = SpecialTokens(start=100, delimiter=101, classify=102)


@pytest.mark.gpt_fixtures
@pytest.mark.parametrize("folder", ["forward_roc", "optimizer"])
def test_multiple_choice_reproduces_transform_roc(gpt_fixtures, gpt_fixture_json, folder):
    from tests.gpt.conftest import fixture_config
    data = json.loads((gpt_fixtures / folder / "inputs.json").read_text())
    config = fixture_config(gpt_fixture_json)
    special = SpecialTokens.for_config(config)
    ids = gpt_fixture_json["special_token_ids"]
    assert (special.start, special.delimiter, special.classify) == (
        ids["_start_"], ids["_delimiter_"], ids["_classify_"])
    max_len = roc_max_len(config.n_ctx)
    assert max_len == data["max_len"]
    choices = [[e2, e3] for e2, e3 in zip(data["endings_x2"], data["endings_x3"])]
    out = multiple_choice_inputs(data["stories_x1"], choices, config.n_ctx, special,
                                 max_len=max_len)
    np.testing.assert_array_equal(out.original_layout(config), np.asarray(data["X"], np.int32))
    np.testing.assert_array_equal(out.mask, np.asarray(data["M"], np.float32))


def test_classification_and_entailment_layouts():
    out = classification_inputs([[5, 6, 7], [8]], 6, SPECIAL)
    np.testing.assert_array_equal(out.token_ids, [[100, 5, 6, 7, 102, 0], [100, 8, 102, 0, 0, 0]])
    np.testing.assert_array_equal(out.mask, [[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]])
    out = entailment_inputs([[1, 2]], [[3]], 7, SPECIAL)
    np.testing.assert_array_equal(out.token_ids, [[100, 1, 2, 101, 3, 102, 0]])


def test_similarity_has_both_orders():
    out = similarity_inputs([[1, 2]], [[3]], 7, SPECIAL)
    assert out.token_ids.shape == (1, 2, 7)
    np.testing.assert_array_equal(out.token_ids[0], [[100, 1, 2, 101, 3, 102, 0],
                                                     [100, 3, 101, 1, 2, 102, 0]])


def test_multiple_choice_any_number_of_choices():
    out = multiple_choice_inputs([[1], [2, 3]], [[[4], [5], [6, 6]], [[7], [8], [9]]], 8, SPECIAL)
    assert out.token_ids.shape == (2, 3, 8) and out.mask.shape == (2, 3, 8)
    np.testing.assert_array_equal(out.token_ids[0, 2], [100, 1, 101, 6, 6, 102, 0, 0])


def test_bad_rows_raise_one_line_errors():
    with pytest.raises(UserInputError,
                       match=r"row 1: the sequence has 7 tokens .* exceeds n_ctx 6"):
        classification_inputs([[1], [1, 2, 3, 4, 5]], 6, SPECIAL)
    with pytest.raises(UserInputError, match=r"row 0, choice 1: the sequence has 9 tokens"):
        multiple_choice_inputs([[1, 2]], [[[3], [4, 5, 6, 7]]], 8, SPECIAL)
    with pytest.raises(UserInputError, match="row 1: choice 0 is missing"):
        multiple_choice_inputs([[1], [2]], [[[3], [4]], [None, [5]]], 8, SPECIAL)
    with pytest.raises(UserInputError, match="row 1 has 1 choices, expected 2"):
        multiple_choice_inputs([[1], [2]], [[[3], [4]], [[5]]], 8, SPECIAL)
    with pytest.raises(UserInputError, match="row 0 has no choices"):
        multiple_choice_inputs([[1]], [[]], 8, SPECIAL)
    with pytest.raises(UserInputError, match="different numbers of rows"):
        entailment_inputs([[1], [2]], [[3]], 8, SPECIAL)
    with pytest.raises(UserInputError, match="n_special is 2"):
        SpecialTokens.for_config(GptConfig(n_vocab=10, n_special=2, n_ctx=8, n_embd=8, n_head=2))
    # max_len cuts each part to its first max_len tokens, so the row fits.
    out = classification_inputs([[1, 2, 3, 4, 5]], 6, SPECIAL, max_len=4)
    np.testing.assert_array_equal(out.token_ids, [[100, 1, 2, 3, 4, 102]])


def _config():
    return GptConfig(n_vocab=20, n_special=3, n_ctx=8, n_embd=16, n_head=2, n_layer=1)


@pytest.mark.parametrize("task, shape, num_classes, logits_shape", [
    ("classification", (3, 8), 4, (3, 4)),
    ("entailment", (3, 8), 3, (3, 3)),
    ("similarity", (3, 2, 8), 2, (3, 2)),
    ("multiple_choice", (3, 5, 8), None, (3, 5)),
])
def test_task_model_shapes_losses_and_keras_round_trip(tmp_path, task, shape, num_classes,
                                                       logits_shape):
    import keras
    from bert_tf.gpt.task_model import GptClassifier
    model = GptClassifier(_config(), task, num_classes=num_classes)
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, 20, size=shape).astype(np.int32)
    tokens[..., 0], tokens[..., 6] = 20, 22
    mask = np.ones(shape, np.float32)
    labels = np.array([0, 1, 1])
    out = model({"token_ids": tokens})
    assert tuple(out["logits"].shape) == logits_shape
    lean = model({"token_ids": tokens}, with_lm_logits=False)
    assert "lm_logits" not in lean
    np.testing.assert_array_equal(lean["logits"], out["logits"])
    losses = model.compute_losses(out, tokens, mask, labels)
    expected = (tf.reduce_mean(losses["clf_losses"]) + 0.5 * tf.reduce_mean(losses["lm_losses"]))
    np.testing.assert_allclose(losses["train_loss"], expected, rtol=1e-6)
    path = tmp_path / "task.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_array_equal(loaded({"token_ids": tokens})["logits"], out["logits"])
    off = GptClassifier(_config(), task, num_classes=num_classes, lm_coef=0.0)
    off_losses = off.compute_losses(off({"token_ids": tokens}), tokens, mask, labels)
    np.testing.assert_allclose(off_losses["train_loss"],
                               tf.reduce_mean(off_losses["clf_losses"]), rtol=1e-6)


def test_similarity_sums_both_orders():
    """Swapping the two orders leaves the logits unchanged (a sum is symmetric)."""
    from bert_tf.gpt.task_model import GptClassifier
    model = GptClassifier(_config(), "similarity", num_classes=2)
    pair = similarity_inputs([[1, 2, 3]], [[4, 5]], 8, SpecialTokens(20, 21, 22))
    swapped = pair.token_ids[:, ::-1]
    np.testing.assert_allclose(model({"token_ids": pair.token_ids})["logits"],
                               model({"token_ids": swapped})["logits"], atol=1e-6)


def test_task_model_bad_arguments():
    from bert_tf.gpt.task_model import GptClassifier
    with pytest.raises(UserInputError, match="task 'ner' is unknown"):
        GptClassifier(_config(), "ner", num_classes=3)
    with pytest.raises(UserInputError, match="needs num_classes >= 2"):
        GptClassifier(_config(), "classification")
    model = GptClassifier(_config(), "classification", num_classes=2)
    with pytest.raises(UserInputError, match="token_ids must have rank 2"):
        model({"token_ids": np.zeros([2, 2, 8], np.int32)})
