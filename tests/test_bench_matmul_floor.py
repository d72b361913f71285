"""The benchmark's matmul floor (bench/peers/matmul_floor_impl.py) is a lower bound for bert_tf's
pretraining step only while it performs the same matrix products: the same shapes, dtypes,
transposes and counts, forward and backward, as bert_tf's traced step (the harness's step:
cross-entropy over the masked-LM logits + NSP, GradientTape, Adam)."""
from __future__ import annotations

import importlib.util
import pathlib

import keras
import numpy as np
import pytest
import tensorflow as tf

PEERS = pathlib.Path(__file__).resolve().parents[1] / "bench" / "peers"
CFG = dict(num_layers=2, hidden_size=64, num_heads=2, intermediate_size=256, vocab_size=1000,
           max_position=64, type_vocab_size=2, dropout=0.1)
BATCH, SEQ, MASKED = 4, 16, 3


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", PEERS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _batch() -> dict:
    rng = np.random.default_rng(0)
    pos = np.stack([np.sort(rng.choice(np.arange(1, SEQ), MASKED, replace=False))
                    for _ in range(BATCH)]).astype(np.int32)
    return {"token_ids": tf.constant(rng.integers(5, CFG["vocab_size"], (BATCH, SEQ)), tf.int32),
            "segment_ids": tf.constant(np.repeat([[0] * (SEQ // 2) + [1] * (SEQ // 2)], BATCH, 0),
                                       tf.int32),
            "padding_mask": tf.ones((BATCH, SEQ), tf.int32),
            "mask_positions": tf.constant(pos),
            "mask_labels": tf.constant(rng.integers(5, CFG["vocab_size"], (BATCH, MASKED)),
                                       tf.int32),
            "nsp_labels": tf.constant([0, 1, 0, 1], tf.int32)}


def _step_products(impl, cfg: dict, floor_module) -> dict:
    batch = _batch()
    model = impl.Pretrainer(cfg)
    model.build(batch)
    variables = model.trainable_variables

    @tf.function
    def step(b):
        with tf.GradientTape() as tape:
            mlm, nsp = model.logits(b, training=True)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                b["mask_labels"], tf.cast(mlm, tf.float32)))
            loss += tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                b["nsp_labels"], tf.cast(nsp, tf.float32)))
        grads = tape.gradient(loss, variables)
        return [g for g in grads if g is not None]

    return floor_module.matrix_products(step.get_concrete_function(batch).graph)


@pytest.mark.parametrize("policy", [None, "mixed_bfloat16"])
def test_matmul_floor_performs_the_matrix_products_of_bert_tfs_step(policy):
    floor = _load("matmul_floor_impl")
    cfg = dict(CFG, dtype_policy=policy)
    try:
        ours = _step_products(_load("bert_tf_impl"), cfg, floor)
        theirs = _step_products(floor, cfg, floor)
    finally:
        keras.config.set_dtype_policy("float32")  # the bert_tf adapter sets the global policy
    assert sum(ours.values()) > 4 * CFG["num_layers"] * 3  # forward and both backward products
    assert {k[1] for k in ours} == {"float32" if policy is None else "bfloat16"}
    assert theirs == ours
