"""Five steps of the original AdamWeightDecayOptimizer (../shared/fixtures/original/optimizer):
losses and learning rate per step, and weights and Adam slots after 5 steps."""
import json

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.checkpoints import load_original_checkpoint, variable_map
from bert_tf.modeling import BertConfig, BertPretrainer
from bert_tf.training import WarmupPolynomialDecay, create_optimizer
from bert_tf.training.pretraining_loop import PretrainingTrainer, TrainerOptions


def test_schedule_matches_formula():
    schedule = WarmupPolynomialDecay(1e-4, num_train_steps=10, num_warmup_steps=2)
    got = [float(schedule(s)) for s in range(12)]
    np.testing.assert_allclose(got, [0, 5e-5, 8e-5, 7e-5, 6e-5, 5e-5, 4e-5, 3e-5, 2e-5, 1e-5, 0, 0],
                               atol=1e-12, rtol=1e-6)


@pytest.fixture(scope="module", params=[(True, False, False), (False, False, False),
                                        (True, True, True)],
                ids=["fused", "op_by_op", "fused_last_layer_at_predictions_only_xla_gelu"])
def five_steps(original_fixtures, request, tmp_path_factory):
    """The shipped trainer's own step (PretrainingTrainer.train_step), 5 times on the batch."""
    fused, last_layer_at_predictions_only, xla_gelu = request.param
    opt_dir = original_fixtures / "optimizer"
    log = json.loads((opt_dir / "training_log.json").read_text())
    config = BertConfig.from_json_file(opt_dir / "bert_config_no_dropout.json")
    trainer = PretrainingTrainer(config, TrainerOptions(
        output_dir=str(tmp_path_factory.mktemp("five_steps")), learning_rate=log["init_lr"],
        num_train_steps=log["num_train_steps"], num_warmup_steps=log["num_warmup_steps"],
        last_layer_at_predictions_only=last_layer_at_predictions_only, xla_gelu=xla_gelu))
    model, optimizer = trainer.model, trainer.optimizer
    load_original_checkpoint(model, original_fixtures / "checkpoint" / "bert_model.ckpt",
                             heads="required")
    optimizer.fused = fused
    batch = {k: tf.constant(v, tf.float32 if k == "masked_lm_weights" else tf.int32)
             for k, v in log["batch"].items()}
    step = tf.function(trainer.train_step)
    results = [{k: float(v) for k, v in step(batch).items()} for _ in range(log["steps_run"])]
    return log, model, optimizer, results


def test_losses_and_learning_rate_per_step(five_steps):
    log, _, _, results = five_steps
    for want, got in zip(log["steps"], results):
        assert got["learning_rate"] == pytest.approx(want["learning_rate"], abs=1e-12)
        for key in ("total_loss", "masked_lm_loss", "next_sentence_loss"):
            ours = got["loss" if key == "total_loss" else key]
            assert ours == pytest.approx(want[key], abs=1e-5), (want["step"], key)
        assert got["grad_norm"] == pytest.approx(want["global_grad_norm_before_clip"], rel=1e-5)


def test_weights_and_slots_after_five_steps(five_steps, original_fixtures):
    log, model, optimizer, _ = five_steps
    reader = tf.train.load_checkpoint(str(original_fixtures / "optimizer" / "after_5_steps.ckpt"))
    assert reader.get_tensor("global_step") == optimizer.iterations.numpy() == 5
    for name, var in variable_map(model).items():
        want = reader.get_tensor(name)
        atol = 1e-6
        np.testing.assert_allclose(var.numpy(), want, atol=atol, rtol=0, err_msg=name)
        m, v = optimizer.moments(var)
        if name == "bert/embeddings/word_embeddings":  # slots summarised in the fixture
            stats = np.load(original_fixtures / "optimizer" / "word_embeddings_adam_slots_stats.npz")
            np.testing.assert_allclose(np.linalg.norm(m.numpy(), axis=1), stats["adam_m_row_l2"],
                                       atol=1e-6, rtol=1e-4)
            np.testing.assert_allclose(v.numpy().sum(axis=1), stats["adam_v_row_sum"],
                                       atol=1e-9, rtol=1e-4)
            continue
        np.testing.assert_allclose(m.numpy(), reader.get_tensor(name + "/adam_m"), atol=1e-6,
                                   rtol=1e-4, err_msg=name + "/adam_m")
        np.testing.assert_allclose(v.numpy(), reader.get_tensor(name + "/adam_v"), atol=1e-9,
                                   rtol=1e-4, err_msg=name + "/adam_v")
    decayed = {n: optimizer.uses_weight_decay(v) for n, v in variable_map(model).items()}
    assert decayed == log["weight_decay_applied"]


def test_fused_adam_equals_keras_adam():
    """FusedAdam (one ResourceApplyAdam kernel per variable) is Keras' Adam, bias correction
    included, for dense and IndexedSlices gradients."""
    import keras

    from bert_tf.training import FusedAdam

    rng = np.random.default_rng(0)
    init = [rng.normal(size=(7, 5)).astype(np.float32), rng.normal(size=(5,)).astype(np.float32)]
    grads = [(rng.normal(size=(7, 5)).astype(np.float32) * (step + 1),
              rng.normal(size=(2,)).astype(np.float32)) for step in range(4)]
    results = []
    for cls in (keras.optimizers.Adam, FusedAdam):
        variables = [keras.Variable(x) for x in init]
        opt = cls(learning_rate=1e-2, beta_1=0.8, beta_2=0.99, epsilon=1e-6)
        for dense, rows in grads:
            sparse = tf.IndexedSlices(tf.constant(rows), tf.constant([1, 3]), tf.constant([5]))
            opt.apply_gradients(zip([tf.constant(dense), sparse], variables))
        results.append([v.numpy() for v in variables])
    for ours, keras_adam, start in zip(results[1], results[0], init):
        np.testing.assert_allclose(ours, keras_adam, atol=1e-6, rtol=1e-6)
        assert np.abs(ours - start).max() > 1e-3  # the variables did move
