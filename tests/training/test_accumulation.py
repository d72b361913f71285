"""Gradient accumulation (`--gradient_accumulation_steps`, bert_tf.training.accumulation) in both
loops and both families: k micro-batches give the weights of one k-times larger batch (dropout
0), with dropout on the same loss-curve statistics, and bad settings fail in one line. (The
kill drill between micro-steps: tests/drills/test_kill_resume_accumulation.py.)

Tolerances: the accumulated update differs from the whole batch's only by float32 rounding
(other summation order of the same terms), a few 1e-8 relative on the gradients; after 3 Adam
steps at lr 1e-3 the weights agree within 1e-6 (the brief's bound)."""
from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.errors import UserInputError
from bert_tf.gpt.config import GptConfig
from bert_tf.gpt.task_model import GptClassifier
from bert_tf.modeling import BertClassifier, BertConfig
from bert_tf.runs.gpt_pretraining import GptPretrainingTrainer, GptTrainerOptions
from bert_tf.training import finetuning
from bert_tf.training.finetuning import FinetuneOptions, train_model
from bert_tf.training.openai_adam import OpenAIAdam
from bert_tf.training.pretraining_loop import PretrainingTrainer, TrainerOptions

SEQ = 8
WEIGHT_TOLERANCE = 1e-6


def bert_config(dropout: float = 0.0) -> BertConfig:
    return BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=64, max_position_embeddings=16, type_vocab_size=2,
                      hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)


def gpt_config(dropout: float = 0.0) -> GptConfig:
    return GptConfig(n_vocab=40, n_special=3, n_ctx=SEQ, n_embd=32, n_head=2, n_layer=2,
                     embd_pdrop=dropout, attn_pdrop=dropout, resid_pdrop=dropout,
                     clf_pdrop=dropout)


def classifier_arrays(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Label 1 iff token 7 occurs; varying lengths (input_mask) so batches are cut."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(10, 50, size=(n, SEQ)).astype(np.int32)
    labels = (np.arange(n) % 2).astype(np.int32)
    ids[labels == 1, rng.integers(1, 4)] = 7
    lengths = rng.integers(4, SEQ + 1, size=n)
    mask = (np.arange(SEQ)[None] < lengths[:, None]).astype(np.int32)
    return {"input_word_ids": ids * mask, "input_mask": mask,
            "input_type_ids": np.zeros_like(ids), "label_ids": labels}


def mean_loss(outputs, batch):
    return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
        batch["label_ids"], outputs["logits"], from_logits=True))


def token_loss(outputs, batch):
    """A (sum, weight) loss whose weight differs between micro-batches: each example's
    cross-entropy counted once per token (weight: the input mask's sum; checks the global
    normaliser)."""
    lengths = tf.reduce_sum(tf.cast(batch["input_mask"], tf.float32), -1)
    losses = keras.losses.sparse_categorical_crossentropy(batch["label_ids"], outputs["logits"],
                                                          from_logits=True)
    return tf.reduce_sum(losses * lengths), tf.reduce_sum(lengths)


def finetune_weights(tmp_path, k: int, loss_fn=mean_loss, dropout: float = 0.0,
                     steps: int = 3, batch: int = 16, seed: int = 1):
    keras.utils.set_random_seed(seed)
    model = BertClassifier(bert_config(dropout), num_labels=2,
                           dropout_rate=dropout).build_from_config_shapes()
    options = FinetuneOptions(output_dir=str(tmp_path / f"k{k}_{seed}"), learning_rate=1e-3,
                              num_train_steps=steps, num_warmup_steps=1, train_batch_size=batch,
                              save_checkpoints_steps=1000, progress=False, plot_curves=False,
                              gradient_accumulation_steps=k)
    result = train_model(model, classifier_arrays(64), loss_fn, options)
    return {n: np.array(v) for n, v in finetuning.checkpoint_variable_map(model).items()}, result


def assert_close(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    worst = max(float(np.max(np.abs(a[n] - b[n]))) for n in a)
    assert worst <= WEIGHT_TOLERANCE, worst


@pytest.mark.parametrize("loss_fn", [mean_loss, pytest.param(token_loss, marks=pytest.mark.long)],
                         ids=["mean", "sum_weight"])
def test_finetuning_bert_k4_equals_one_big_batch(tmp_path, loss_fn):
    base, r1 = finetune_weights(tmp_path, 1, loss_fn)
    accumulated, r4 = finetune_weights(tmp_path, 4, loss_fn)
    assert_close(base, accumulated)
    # The schedule counts updates: the same learning rates at the same steps.
    assert [h["learning_rate"] for h in r1["history"]] == pytest.approx(
        [h["learning_rate"] for h in r4["history"]], abs=0)
    assert [h["loss"] for h in r1["history"]] == pytest.approx(
        [h["loss"] for h in r4["history"]], abs=1e-6)


@pytest.mark.long
def test_finetuning_gpt_classifier_k2_equals_one_big_batch(tmp_path):
    rng = np.random.default_rng(3)
    tokens = rng.integers(0, 40, size=(32, SEQ)).astype(np.int32)
    lengths = rng.integers(3, SEQ, size=32)
    tokens[np.arange(32), lengths] = 42  # the classify token ends each example
    mask = (np.arange(SEQ)[None] <= lengths[:, None]).astype(np.float32)
    arrays = {"token_ids": tokens, "mask": mask, "label_ids": (np.arange(32) % 2).astype(np.int32)}

    def run(k):
        keras.utils.set_random_seed(5)
        model = GptClassifier(gpt_config(), task="classification", num_classes=2, name="clf")

        def loss_fn(outputs, batch):
            return model.compute_losses(outputs, batch["token_ids"], batch["mask"],
                                        batch["label_ids"])["train_loss"]

        options = FinetuneOptions(output_dir=str(tmp_path / f"gpt{k}"), learning_rate=1e-3,
                                  num_train_steps=3, num_warmup_steps=0, train_batch_size=8,
                                  progress=False, plot_curves=False,
                                  gradient_accumulation_steps=k)
        train_model(model, arrays, loss_fn, options, input_keys=("token_ids",),
                    optimizer_fn=lambda: OpenAIAdam(1e-3, t_total=3, warmup=0.2,
                                                    max_grad_norm=0.0),
                    length_key="mask")
        return [np.array(v) for v in model.trainable_variables]

    base, accumulated = run(1), run(2)
    assert_close(dict(enumerate(base)), dict(enumerate(accumulated)))


def bert_pretraining_dataset(ctx):
    """Synthetic pretraining batches of 8: the masked-LM weights differ between examples (the
    global normaliser matters)."""
    rng = np.random.default_rng(0)
    n, p = 64, 3
    ids = rng.integers(5, 50, size=(n, SEQ)).astype(np.int32)
    weights = (np.arange(p)[None] < rng.integers(1, p + 1, size=(n, 1))).astype(np.float32)
    features = {"input_ids": ids, "input_mask": np.ones_like(ids),
                "segment_ids": np.zeros_like(ids),
                "masked_lm_positions": rng.integers(1, SEQ, size=(n, p)).astype(np.int32),
                "masked_lm_ids": rng.integers(5, 50, size=(n, p)).astype(np.int32),
                "masked_lm_weights": weights,
                "next_sentence_labels": rng.integers(0, 2, size=(n, 1)).astype(np.int32)}
    return (tf.data.Dataset.from_tensor_slices(features).repeat()
            .batch(ctx.get_per_replica_batch_size(8), drop_remainder=True))


def gpt_pretraining_dataset(ctx):
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 40, size=(64, SEQ)).astype(np.int32)
    return (tf.data.Dataset.from_tensor_slices({"token_ids": ids}).repeat()
            .batch(ctx.get_per_replica_batch_size(8), drop_remainder=True))


def pretrain(trainer_cls, config, options_cls, dataset_fn, out, k, **extra):
    keras.utils.set_random_seed(2)
    options = options_cls(output_dir=str(out), train_batch_size=8, learning_rate=1e-3,
                          num_train_steps=3, num_warmup_steps=1, save_checkpoints_steps=100,
                          iterations_per_loop=3, gradient_accumulation_steps=k, **extra)
    trainer = trainer_cls(config, options)
    records = trainer.train(dataset_fn)
    return {v.path: np.array(v) for v in trainer.model.trainable_variables}, records


@pytest.mark.long
def test_pretraining_bert_k4_equals_one_big_batch(tmp_path):
    extra = {"xla_gelu": False}
    base, r1 = pretrain(PretrainingTrainer, bert_config(), TrainerOptions,
                        bert_pretraining_dataset, tmp_path / "k1", 1, **extra)
    acc, r4 = pretrain(PretrainingTrainer, bert_config(), TrainerOptions,
                       bert_pretraining_dataset, tmp_path / "k4", 4, **extra)
    assert_close(base, acc)
    for a, b in zip(r1, r4):
        assert a["learning_rate"] == b["learning_rate"]
        for key in ("loss", "masked_lm_loss", "next_sentence_loss", "grad_norm"):
            assert b[key] == pytest.approx(a[key], abs=1e-5), (a["step"], key)


@pytest.mark.long
def test_pretraining_gpt_k2_equals_one_big_batch(tmp_path):
    base, r1 = pretrain(GptPretrainingTrainer, gpt_config(), GptTrainerOptions,
                        gpt_pretraining_dataset, tmp_path / "k1", 1)
    acc, r2 = pretrain(GptPretrainingTrainer, gpt_config(), GptTrainerOptions,
                       gpt_pretraining_dataset, tmp_path / "k2", 2)
    assert_close(base, acc)
    assert [r["loss"] for r in r1] == pytest.approx([r["loss"] for r in r2], abs=1e-5)


@pytest.mark.long
def test_dropout_on_same_loss_curve_statistics(tmp_path):
    """Dropout 0.1: the micro-batches draw other masks, so the curves differ step by step but
    not in distribution. Over 3 seeds x 40 steps, the mean loss of the last 10 steps of k=4 is
    within 0.1 of k=1's (the seeds' own spread of that mean is ~0.05 on this problem) and both
    fall well below the first steps' (ln 2 = 0.69)."""
    tails = {1: [], 4: []}
    for seed in (1, 2, 3):
        for k in (1, 4):
            _, result = finetune_weights(tmp_path, k, dropout=0.1, steps=40, seed=seed)
            losses = [h["loss"] for h in result["history"]]
            tails[k].append(np.mean(losses[-10:]))
            assert np.mean(losses[-10:]) < 0.8 * np.mean(losses[:5]), (k, seed, losses)
    assert abs(np.mean(tails[1]) - np.mean(tails[4])) < 0.1, tails


def test_bad_settings_one_line(tmp_path):
    with pytest.raises(UserInputError, match=r"^--gradient_accumulation_steps=0: expected an "
                                             r"integer >= 1$"):
        FinetuneOptions(output_dir=str(tmp_path), learning_rate=1e-3, num_train_steps=1,
                        num_warmup_steps=0, train_batch_size=8,
                        gradient_accumulation_steps=0).validate()
    with pytest.raises(UserInputError, match=r"--train_batch_size=8 is not divisible by 3"):
        TrainerOptions(output_dir=str(tmp_path), train_batch_size=8,
                       gradient_accumulation_steps=3)
    with pytest.raises(UserInputError, match="--gradient_accumulation_steps=-1"):
        GptTrainerOptions(output_dir=str(tmp_path), gradient_accumulation_steps=-1)


@pytest.mark.long
def test_mirrored_two_replicas_accumulated_equals_one_device_whole_batch(tmp_path):
    """MirroredStrategy on 2 logical CPUs with k=2 (per replica: 2 micro-batches) gives one
    device's k=1 weights, in both loops (within 1e-6: only float rounding differs)."""
    import os
    import subprocess
    import sys

    worker = os.path.join(os.path.dirname(__file__), "_strategy_worker.py")
    for args in (("accumulation", "one_device", tmp_path / "one", 1),
                 ("accumulation", "mirrored", tmp_path / "two", 2, 2)):
        proc = subprocess.run([sys.executable, worker, *map(str, args)], capture_output=True,
                              text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-4000:]
    for name in ("finetuning.npz", "pretraining.npz"):
        one, two = np.load(tmp_path / "one" / name), np.load(tmp_path / "two" / name)
        assert_close({k: one[k] for k in one.files}, {k: two[k] for k in two.files})


@pytest.mark.long
def test_pretraining_mixed_float16_loss_scaling_with_accumulation(tmp_path):
    """Under mixed_float16 (dynamic loss scaling) the scaled micro-batch gradients are summed and
    unscaled once by the LossScaleOptimizer: k=2 follows k=1. Tolerance 2e-3 on the losses and
    weights: float16 activations round at ~1e-3 relative, differently in a micro-batch."""
    from bert_tf.training.precision import set_mixed_precision

    set_mixed_precision("mixed_float16")
    try:
        base, r1 = pretrain(PretrainingTrainer, bert_config(), TrainerOptions,
                            bert_pretraining_dataset, tmp_path / "k1", 1, xla_gelu=False)
        acc, r2 = pretrain(PretrainingTrainer, bert_config(), TrainerOptions,
                           bert_pretraining_dataset, tmp_path / "k2", 2, xla_gelu=False)
    finally:
        set_mixed_precision("float32")
    assert [r["loss"] for r in r1] == pytest.approx([r["loss"] for r in r2], abs=2e-3)
    worst = max(float(np.max(np.abs(base[n] - acc[n]))) for n in base)
    assert worst <= 2e-3, worst


def test_bad_setting_fails_when_the_run_options_are_made(tmp_path):
    """A fine-tuning script's options (made right after its flags are parsed) refuse k < 1
    before any data is read."""
    from bert_tf.tasks.classifier import ClassifierRunOptions

    with pytest.raises(UserInputError, match=r"^--gradient_accumulation_steps=0: expected"):
        ClassifierRunOptions(bert_config_file="c.json", vocab_file="v.txt",
                             output_dir=str(tmp_path), task_name="mrpc",
                             gradient_accumulation_steps=0)
