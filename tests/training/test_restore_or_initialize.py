"""The trainer's public restore/resume API, `PretrainingTrainer.restore_or_initialize` (what the
pretraining drivers call for evaluation alone, and what `train` calls first): a run stopped after
a checkpoint and taken up by a new trainer (a restart: other random seeds, fresh weights) restores
the step, weights, optimizer slots and dropout streams and continues bit for bit as the
uninterrupted run; a new run starts from `init_checkpoint` or from its fresh weights.

In one process, on a tiny BERT (dropout 0.1, as every real config) and a tiny GPT-1 with fixed
synthetic batches: no fixtures needed."""
from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.checkpoints import variable_map
from bert_tf.modeling import BertConfig
from bert_tf.training.pretraining_loop import PretrainingTrainer, TrainerOptions

SEQ, PREDS, BATCH = 16, 3, 4
CONFIG = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=SEQ, type_vocab_size=2,
                    hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)


def _bert_batches(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
    """The same 12 examples over and over, in order (the re-created input skips what a resumed
    run consumed)."""
    rng = np.random.default_rng(0)
    n = 12
    examples = {
        "input_ids": rng.integers(5, CONFIG.vocab_size, (n, SEQ)).astype(np.int32),
        "input_mask": np.ones((n, SEQ), np.int32),
        "segment_ids": np.repeat((np.arange(SEQ) >= SEQ // 2)[None].astype(np.int32), n, 0),
        "masked_lm_positions": np.sort(rng.choice(np.arange(1, SEQ), (n, PREDS)), -1)
        .astype(np.int32),
        "masked_lm_ids": rng.integers(5, CONFIG.vocab_size, (n, PREDS)).astype(np.int32),
        "masked_lm_weights": np.ones((n, PREDS), np.float32),
        "next_sentence_labels": rng.integers(0, 2, (n, 1)).astype(np.int32),
    }
    ds = tf.data.Dataset.from_tensor_slices(examples).repeat()
    return ds.batch(ctx.get_per_replica_batch_size(BATCH), drop_remainder=True)


class _ProgressRecorder(PretrainingTrainer):
    """Records its `on_progress` calls (step, start_step, end_step)."""

    def __init__(self, *args, **kwargs):
        self.progress = []
        super().__init__(*args, **kwargs)

    def on_progress(self, record, start_step, end_step):
        self.progress.append((record["step"], start_step, end_step))


def _bert_trainer(output_dir, **options) -> _ProgressRecorder:
    return _ProgressRecorder(CONFIG, TrainerOptions(
        output_dir=str(output_dir), train_batch_size=BATCH, learning_rate=1e-3,
        num_train_steps=6, num_warmup_steps=1, save_checkpoints_steps=3, iterations_per_loop=3,
        xla_gelu=False, **options))  # op-by-op GELU: no XLA compile per trainer (test time)


def _values(model) -> dict[str, np.ndarray]:
    return {name: np.array(v) for name, v in variable_map(model).items()}


def _checkpoint_tensors(prefix) -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(str(prefix))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
            if k != "_CHECKPOINTABLE_OBJECT_GRAPH"}


def _assert_same(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.mark.long
def test_a_new_trainer_restores_and_continues_as_the_uninterrupted_run(tmp_path):
    keras.utils.set_random_seed(1)
    full = _bert_trainer(tmp_path / "full").train(_bert_batches)
    keras.utils.set_random_seed(1)
    killed = _bert_trainer(tmp_path / "run")
    first = killed.train(_bert_batches, stop_after_step=3)
    assert [r["loss"] for r in first] == [r["loss"] for r in full[:3]]

    keras.utils.set_random_seed(999)  # the restart: other seeds, other fresh weights
    # init_checkpoint (here the full run's step-6 weights) is for a new run only: a restart
    # resumes its own checkpoint
    restarted = _bert_trainer(tmp_path / "run",
                              init_checkpoint=str(tmp_path / "full" / "model.ckpt-6"))
    assert restarted.latest_training_checkpoint == str(
        tmp_path / "run" / "training_checkpoints" / "ckpt-3")
    assert restarted.restore_or_initialize() == 3
    assert int(restarted.global_step.numpy()) == 3
    _assert_same(_values(killed.model), _values(restarted.model))
    assert restarted.restore_or_initialize() == 3  # again: the same checkpoint, the same step

    second = restarted.train(_bert_batches)
    assert [r["step"] for r in second] == [4, 5, 6]
    assert killed.progress == [(3, 0, 3)] and restarted.progress == [(6, 3, 6)]
    assert [r["loss"] for r in second] == [r["loss"] for r in full[3:]]  # dropout included
    names = [n for n, _ in tf.train.list_variables(str(tmp_path / "run" / "training_checkpoints"
                                                       / "ckpt-6"))]
    assert any(n.startswith("random_state/") for n in names)
    _assert_same(_checkpoint_tensors(tmp_path / "full" / "training_checkpoints" / "ckpt-6"),
                 _checkpoint_tensors(tmp_path / "run" / "training_checkpoints" / "ckpt-6"))
    assert restarted.latest_training_checkpoint.endswith("ckpt-6")


def test_a_new_run_starts_from_init_checkpoint_or_its_fresh_weights(tmp_path):
    keras.utils.set_random_seed(1)
    source = _bert_trainer(tmp_path / "source")
    init_checkpoint = source.export_original_checkpoint()  # model.ckpt-0 (original names)

    keras.utils.set_random_seed(2)
    fresh = _bert_trainer(tmp_path / "fresh")
    before = _values(fresh.model)
    assert fresh.latest_training_checkpoint is None
    assert fresh.restore_or_initialize() == 0
    _assert_same(before, _values(fresh.model))

    started = _bert_trainer(tmp_path / "started", init_checkpoint=init_checkpoint)
    assert started.latest_training_checkpoint is None
    assert started.restore_or_initialize() == 0
    _assert_same(_values(source.model), _values(started.model))


def test_gpt_trainer_restores_its_weights_by_their_original_names(tmp_path):
    """GPT-1's trainer adds its weights under their original names (`checkpoint_objects`)."""
    from bert_tf.gpt.config import GptConfig
    from bert_tf.runs.gpt_pretraining import GptPretrainingTrainer, GptTrainerOptions

    config = GptConfig(n_vocab=40, n_special=0, n_ctx=8, n_embd=16, n_head=2, n_layer=1)
    token_ids = np.random.default_rng(0).integers(0, 40, (8, 8)).astype(np.int32)

    def batches(ctx):
        ds = tf.data.Dataset.from_tensor_slices({"token_ids": token_ids}).repeat()
        return ds.batch(ctx.get_per_replica_batch_size(4), drop_remainder=True)

    def trainer():
        return GptPretrainingTrainer(config, GptTrainerOptions(
            output_dir=str(tmp_path / "gpt"), train_batch_size=4, num_train_steps=4,
            num_warmup_steps=1, save_checkpoints_steps=2, iterations_per_loop=2))

    keras.utils.set_random_seed(1)
    first = trainer()
    first.train(batches, stop_after_step=2)
    keras.utils.set_random_seed(2)
    restarted = trainer()
    assert restarted.restore_or_initialize() == 2
    for (name, a), (_, b) in zip(first.model.original_variables(),
                                 restarted.model.original_variables()):
        np.testing.assert_array_equal(np.array(a), np.array(b), err_msg=name)
    names = [n for n, _ in tf.train.list_variables(restarted.latest_training_checkpoint)]
    assert any(n.startswith("gpt/") for n in names)
