"""Length-aware training (each batch cut to its longest example, `FinetuneOptions.length_bucketing`,
the default) equals the padded path on real data with dropout on: MRPC train rows through the
original release's fixture checkpoint (BERT, dropout 0.1) and through a small GPT-1 similarity
classifier (all its dropouts 0.1): the same batches, the same dropout masks, per-step losses and
final weights equal up to float rounding; an interrupted cut run resumes bit-identically
(the BERT equality runs by default; the resume and GPT-1 tests, ~40 s each, are slow)."""
from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.checkpoints import read_checkpoint
from bert_tf.training.length_batching import example_lengths
from bert_tf.training import finetuning
from bert_tf.training.finetuning import FinetuneOptions, train_model

SEQ = 128
NUM_ROWS = 64
LOSS_TOLERANCE = 2e-5  # float rounding of the shorter matmuls / softmax rows
WEIGHT_TOLERANCE = 2e-6


@pytest.fixture(scope="module")
def mrpc_bert(original_fixtures, shared_data):
    from bert_tf.pretrained import load_bert
    from bert_tf.tasks import glue
    from bert_tf.modeling import BertClassifier

    processor = glue.get_processor("mrpc")
    split = processor.get_train_examples(str(shared_data / "glue" / "MRPC"))
    examples = list(getattr(split, "examples", split))[:NUM_ROWS]
    checkpoint = original_fixtures / "checkpoint"
    args = (str(checkpoint / "bert_config.json"), str(original_fixtures / "vocab_uncased.txt"),
            str(checkpoint / "bert_model.ckpt"))
    config, tokenizer, _ = load_bert(*args, model_factory=lambda c: BertClassifier(c, 2))
    assert config.hidden_dropout_prob == 0.1 and config.attention_probs_dropout_prob == 0.1
    features = glue.convert_examples_to_features(examples, processor.get_labels(), SEQ, tokenizer)
    arrays = glue.features_to_arrays(features, regression=False)

    def make_model():
        keras.utils.set_random_seed(4321)  # the head's initialisation and the input shuffle
        return load_bert(*args, model_factory=lambda c: BertClassifier(c, 2))[2]

    return arrays, make_model


def _bert_loss(outputs, batch):
    return tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
        batch["label_ids"], outputs["logits"], from_logits=True))


def _options(out, length_bucketing: bool, steps: int = 6) -> FinetuneOptions:
    return FinetuneOptions(output_dir=str(out), learning_rate=1e-4, num_train_steps=steps,
                           num_warmup_steps=2, train_batch_size=8, save_checkpoints_steps=3,
                           progress=False, plot_curves=False, length_bucketing=length_bucketing)


def _max_weight_difference(a_prefix: str, b_prefix: str) -> float:
    a, b = read_checkpoint(a_prefix), read_checkpoint(b_prefix)
    assert sorted(a) == sorted(b)
    return max(float(np.max(np.abs(np.asarray(a[n], np.float64) - np.asarray(b[n], np.float64))))
               if np.size(a[n]) else 0.0 for n in a)


@pytest.mark.long
def test_mrpc_bert_cut_batches_equal_padded_with_dropout(mrpc_bert, tmp_path):
    arrays, make_model = mrpc_bert
    lengths = example_lengths(arrays["input_mask"])
    assert lengths.max() <= 96 < SEQ  # every batch is cut (to 64 or 96 of 128)
    padded = train_model(make_model(), arrays, _bert_loss, _options(tmp_path / "padded", False))
    cut = train_model(make_model(), arrays, _bert_loss, _options(tmp_path / "cut", True))
    losses_padded = np.array([r["loss"] for r in padded["history"]])
    losses_cut = np.array([r["loss"] for r in cut["history"]])
    assert len(losses_cut) == 6
    np.testing.assert_allclose(losses_cut, losses_padded, rtol=0, atol=LOSS_TOLERANCE)
    # Not vacuous: the losses move.
    assert np.ptp(losses_padded) > 1e-3
    weight_diff = _max_weight_difference(padded["checkpoint"], cut["checkpoint"])
    print(f"BERT: max |loss diff| {np.abs(losses_cut - losses_padded).max():.3g}, "
          f"max |weight diff| {weight_diff:.3g}")
    assert weight_diff < WEIGHT_TOLERANCE
    # Dropout streams and step are the same state.
    a, b = read_checkpoint(padded["checkpoint"]), read_checkpoint(cut["checkpoint"])
    for name in a:
        if name.startswith(finetuning.RANDOM_STATE_SCOPE) or name == "global_step":
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.mark.slow
def test_mrpc_bert_cut_run_resumes_bit_identical(mrpc_bert, tmp_path):
    """A cut run stopped after its step-3 checkpoint (by a NaN loss at step 5) and started again
    continues exactly: losses of steps 4..6 and every tensor of model.ckpt-6 (weights, adam
    slots, dropout streams, step) equal the uninterrupted cut run's, bit for bit."""
    arrays, make_model = mrpc_bert
    full = train_model(make_model(), arrays, _bert_loss, _options(tmp_path / "full", True))
    calls = tf.Variable(0)

    def fails_at_step_5(outputs, batch):
        calls.assign_add(1)
        poison = tf.where(tf.equal(calls, 5), np.float32(np.nan), np.float32(1.0))
        return _bert_loss(outputs, batch) * poison

    out = tmp_path / "resumed"
    with pytest.raises(FloatingPointError, match="at step 5.*model.ckpt-3"):
        train_model(make_model(), arrays, fails_at_step_5, _options(out, True))
    again = train_model(make_model(), arrays, _bert_loss, _options(out, True))
    assert again["start_step"] == 3
    assert [r["loss"] for r in again["history"]] == [r["loss"] for r in full["history"][3:]]
    a, b = read_checkpoint(full["checkpoint"]), read_checkpoint(again["checkpoint"])
    assert int(a["global_step"]) == 6 and any("adam_m" in n for n in a)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.mark.slow
def test_gpt_similarity_cut_batches_equal_padded_with_dropout(mrpc_bert, tmp_path):
    """GPT-1 (causal, classify token read where it is, LM loss over the mask): cut by "mask"."""
    from bert_tf.gpt.config import GptConfig
    from bert_tf.gpt.input_transforms import SpecialTokens, similarity_inputs
    from bert_tf.training.openai_adam import OpenAIAdam
    from bert_tf.gpt.task_model import GptClassifier

    arrays, _ = mrpc_bert
    # Segments A and B of the BERT features (real MRPC word pieces), as GPT's two texts.
    ids, types, mask = arrays["input_word_ids"], arrays["input_type_ids"], arrays["input_mask"]
    texts_a = [row[1:][(t[1:] == 0) & (m[1:] == 1)][:-1] for row, t, m in zip(ids, types, mask)]
    texts_b = [row[(t == 1) & (m == 1)][:-1] for row, t, m in zip(ids, types, mask)]
    config = GptConfig(n_vocab=30522, n_special=3, n_ctx=SEQ, n_embd=32, n_head=2, n_layer=2)
    gpt = similarity_inputs(texts_a, texts_b, SEQ, SpecialTokens.for_config(config))
    data = {"token_ids": gpt.token_ids, "mask": gpt.mask, "label_ids": arrays["label_ids"]}
    assert example_lengths(gpt.mask).max() <= 96

    def run(out, length_bucketing):
        keras.utils.set_random_seed(77)
        model = GptClassifier(config, task="similarity", num_classes=2, lm_coef=0.5,
                              name="gpt_classifier")
        model({"token_ids": data["token_ids"][:1]})

        def loss_fn(outputs, batch):
            return model.compute_losses(outputs, batch["token_ids"], batch["mask"],
                                        batch["label_ids"])["train_loss"]

        run.model = model
        return train_model(model, data, loss_fn, _options(out, length_bucketing),
                           input_keys=("token_ids",), length_key="mask",
                           optimizer_fn=lambda: OpenAIAdam(1e-3, t_total=6, l2=0.01,
                                                           max_grad_norm=0.0))

    padded, cut = run(tmp_path / "padded", False), run(tmp_path / "cut", True)
    losses_padded = np.array([r["loss"] for r in padded["history"]])
    losses_cut = np.array([r["loss"] for r in cut["history"]])
    np.testing.assert_allclose(losses_cut, losses_padded, rtol=0, atol=LOSS_TOLERANCE)
    assert np.ptp(losses_padded) > 1e-3
    # Evaluation as run_gpt_classifier runs it on one device: length-sorted batches cut by
    # "mask" give the full-length logits.
    from bert_tf.training.length_batching import predict_length_bucketed
    from bert_tf.training.finetuning import predict_arrays

    model = run.model
    full = predict_arrays(model, data, 16, ["logits"], input_keys=("token_ids",),
                          progress=False, length_bucketing=False)["logits"]
    bucketed = predict_length_bucketed(model, data, 16, ["logits"], input_keys=("token_ids",),
                                       mask_key="mask", progress=False)["logits"]
    np.testing.assert_allclose(bucketed, full, rtol=0, atol=1e-5)
    assert (bucketed.argmax(-1) == full.argmax(-1)).all()
    weight_diff = _max_weight_difference(padded["checkpoint"], cut["checkpoint"])
    print(f"GPT: eval max |logit diff| {np.abs(bucketed - full).max():.3g}; max |loss diff| {np.abs(losses_cut - losses_padded).max():.3g}, "
          f"max |weight diff| {weight_diff:.3g}")
    assert weight_diff < WEIGHT_TOLERANCE


@pytest.mark.long
@pytest.mark.parametrize("task", ["multiple_choice", "token_classification"])
def test_choice_and_token_models_cut_batches_equal_padded(tmp_path, task):
    """[N, C, S] choices (flattened to [N·C, L] inside the model) and per-token labels [N, S]
    (cut with the batch): losses and weights of the cut path equal the padded path's, dropout
    0.1 (a small random model on synthetic ids: the layouts, not the data, are under test)."""
    from bert_tf.modeling import BertConfig, BertMultipleChoice, BertTokenClassifier

    config = BertConfig(vocab_size=60, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=128, type_vocab_size=2,
                        hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    rng = np.random.default_rng(0)
    n, choices, seq = 24, 3, 96
    lengths = rng.integers(5, 60, size=(n, choices))  # every batch cut to 64 of 96
    mask = (np.arange(seq)[None, None] < lengths[..., None]).astype(np.int32)
    ids = (rng.integers(5, 60, size=(n, choices, seq)) * mask).astype(np.int32)
    if task == "multiple_choice":
        data = {"input_word_ids": ids, "input_mask": mask, "input_type_ids": np.zeros_like(ids),
                "label_ids": rng.integers(0, choices, n).astype(np.int32)}

        def make():
            return BertMultipleChoice(config, num_choices=choices)

        loss_fn = _bert_loss
    else:
        mask = mask[:, 0]
        data = {"input_word_ids": ids[:, 0], "input_mask": mask,
                "input_type_ids": np.zeros_like(mask),
                "label_ids": (rng.integers(0, 5, (n, seq)) * mask).astype(np.int32)}

        def make():
            return BertTokenClassifier(config, 5)

        def loss_fn(outputs, batch):
            weights = tf.cast(batch["input_mask"], tf.float32)
            losses = tf.keras.losses.sparse_categorical_crossentropy(
                batch["label_ids"], outputs["logits"], from_logits=True)
            return tf.reduce_sum(losses * weights), tf.reduce_sum(weights)

    results = []
    for length_bucketing in (False, True):
        keras.utils.set_random_seed(3)
        model = make()
        options = FinetuneOptions(output_dir=str(tmp_path / str(length_bucketing)),
                                  learning_rate=1e-3, num_train_steps=4, num_warmup_steps=1,
                                  train_batch_size=8, progress=False, plot_curves=False,
                                  length_bucketing=length_bucketing)
        history = train_model(model, data, loss_fn, options)["history"]
        results.append((np.array([r["loss"] for r in history]),
                        [v.numpy() for v in model.trainable_variables]))
    (losses_padded, weights_padded), (losses_cut, weights_cut) = results
    np.testing.assert_allclose(losses_cut, losses_padded, rtol=0, atol=LOSS_TOLERANCE)
    for a, b in zip(weights_padded, weights_cut):
        np.testing.assert_allclose(b, a, rtol=0, atol=WEIGHT_TOLERANCE)
