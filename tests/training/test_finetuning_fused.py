"""`FinetuneOptions.fused_kernels` / `make_train_step(fused_kernels=True)`: the fine-tuning step
with the BERT blocks' XLA-fused training kernels (`finetuning.fused_block_kernels`, the
pretraining trainer's `xla_gelu_in_training`) computes what the op-by-op step computes, with
the same dropout masks; the model's own setting is left as it was.

Tolerances: the fused kernels differ from the op-by-op path in float32 rounding only (the order
of the LayerNorm reductions and of the GELU's terms; tests/modeling/test_fused_paths.py bounds
each tensor by 1e-5 of its largest element). Through a whole step that gives losses and global
gradient norms within 1e-5 relative (measured on this tiny model: losses equal, gradient norms
1.2e-7 relative), and weights after AdamWeightDecay steps within 3 steps x lr x 1e-2: Adam
divides each gradient element by its own running magnitude, so a rounding difference in a
gradient element moves its weight by a fraction of the learning rate per step, not by a fraction
of the weight (measured: at most 5.7e-4 x lr after 3 steps).
"""
from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.modeling import BertClassifier, BertConfig
from bert_tf.training.finetuning import (FinetuneOptions, fused_block_kernels, make_train_step,
                                         train_model)
from bert_tf.training.optimization import create_optimizer

SEQ = 32
LR = 1e-3
STEPS = 3
CONFIG = dict(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
              intermediate_size=64, max_position_embeddings=SEQ, type_vocab_size=2,
              hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)


def _model():
    keras.utils.set_random_seed(7)
    return BertClassifier(BertConfig(**CONFIG), num_labels=2).build_from_config_shapes()


def _batches(count=STEPS, batch=8, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        lengths = rng.integers(5, SEQ + 1, size=batch)
        mask = (np.arange(SEQ)[None] < lengths[:, None]).astype(np.int32)
        cut = int(-(-lengths.max() // 8) * 8)
        ids = rng.integers(5, CONFIG["vocab_size"], size=(batch, SEQ)).astype(np.int32) * mask
        out.append({"input_word_ids": ids[:, :cut], "input_mask": mask[:, :cut],
                    "input_type_ids": np.zeros_like(ids[:, :cut]),
                    "label_ids": rng.integers(0, 2, size=batch).astype(np.int32)})
    return out


def _loss(outputs, batch):
    return tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
        batch["label_ids"], outputs["logits"], from_logits=True))


def _train(fused: bool):
    model = _model()
    optimizer = create_optimizer(LR, 100, 0)
    step = tf.function(make_train_step(model, optimizer, _loss, padded_length=SEQ,
                                       length_key="input_mask", fused_kernels=fused))
    history = [{k: float(v) for k, v in step(b).items()} for b in _batches()]
    return model, history, step


def test_fused_step_equals_op_by_op_step():
    plain_model, plain, _ = _train(False)
    fused_model, fused, fused_step = _train(True)
    graph = fused_step.get_concrete_function(_batches(1)[0]).graph
    ops = {op.type for op in graph.get_operations()}
    assert "XlaLaunch" in ops or any("xla" in op.name.lower()
                                     for op in graph.get_operations()), "no fused kernel traced"
    for key in ("loss", "grad_norm"):
        a, b = np.array([h[key] for h in plain]), np.array([h[key] for h in fused])
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=0)
    assert np.ptp([h["loss"] for h in plain]) > 1e-4  # the steps moved the weights
    for a, b in zip(plain_model.trainable_variables, fused_model.trainable_variables):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=0,
                                   atol=STEPS * LR * 1e-2, err_msg=a.path)
    # The model's own setting is restored after tracing (its config / export keep it).
    assert not any(b.xla_gelu_in_training for b in fused_model.encoder.blocks)


def test_fused_block_kernels_sets_and_restores():
    model = _model()
    blocks = model.encoder.blocks
    with fused_block_kernels(model):
        assert all(b.xla_gelu_in_training for b in blocks)
    assert not any(b.xla_gelu_in_training for b in blocks)
    blocks[0].xla_gelu_in_training = True
    with pytest.raises(RuntimeError):
        with fused_block_kernels(model):
            raise RuntimeError("inside")
    assert [b.xla_gelu_in_training for b in blocks] == [True, False]
    with fused_block_kernels(model, enabled=False):
        assert [b.xla_gelu_in_training for b in blocks] == [True, False]
    assert model.encoder.get_config()["xla_gelu_in_training"] is False


@pytest.mark.long
def test_train_model_fused_option_matches(tmp_path):
    """The option reaches `train_model`'s step: same losses as the default run (two whole runs
    with checkpoints: long)."""
    arrays = {k: np.concatenate([np.pad(b[k], [(0, 0), (0, SEQ - b[k].shape[1])])
                                 if b[k].ndim == 2 else b[k] for b in _batches(2, seed=3)])
              for k in ("input_word_ids", "input_mask", "input_type_ids", "label_ids")}
    runs = {}
    for fused in (False, True):
        options = FinetuneOptions(output_dir=str(tmp_path / str(fused)), learning_rate=LR,
                                  num_train_steps=2, num_warmup_steps=0, train_batch_size=8,
                                  progress=False, plot_curves=False, fused_kernels=fused)
        runs[fused] = [h["loss"] for h in train_model(_model(), arrays, _loss,
                                                      options)["history"]]
    np.testing.assert_allclose(runs[True], runs[False], rtol=1e-5, atol=0)


@pytest.mark.long
@pytest.mark.parametrize("memory_saver", [{"gradient_accumulation_steps": 2},
                                          {"recompute": True}])
def test_fused_step_with_memory_savers(memory_saver):
    """Gradient accumulation (the fused context in each micro-step) and activation
    recomputation (`tf.recompute_grad` around fused blocks) give the op-by-op losses."""
    from bert_tf.modeling.recompute import enable_recompute

    def losses(fused):
        model = _model()
        if memory_saver.get("recompute"):
            enable_recompute(model)
        step = tf.function(make_train_step(
            model, create_optimizer(LR, 100, 0), _loss, padded_length=SEQ,
            length_key="input_mask", fused_kernels=fused,
            gradient_accumulation_steps=memory_saver.get("gradient_accumulation_steps", 1)))
        return [float(step(b)["loss"]) for b in _batches()]

    np.testing.assert_allclose(losses(True), losses(False), rtol=1e-5, atol=0)
