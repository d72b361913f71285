"""LoRA in the fine-tuning loop under mixed_bfloat16 and under MirroredStrategy (issue 34).

mixed_bfloat16: the adapters are float32 variables (Keras' variable dtype; only the
computation is bfloat16), the loop's step trains them (and only them and the head), the loss
stays finite and falls on a tiny separable task. MirroredStrategy on 2 logical CPU devices
(fresh processes: devices are set before TF starts): the same 3 LoRA updates as one device
within 1e-6 (dropout 0, so only the order of the replica gradients' sum differs: float32
rounding, ~1e-7 relative on weights of size <= 1, as tests/training/test_accumulation.py's
bound for the same model size). Both are long: ~30-90 s each on a loaded 2-core machine."""
from __future__ import annotations

import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.modeling import BertClassifier, lora
from bert_tf.training import finetuning
from bert_tf.training.precision import precision_policy

from test_accumulation import WEIGHT_TOLERANCE, bert_config, classifier_arrays, mean_loss

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(autouse=True)
def _float32_after():
    yield
    keras.mixed_precision.set_global_policy("float32")


@pytest.mark.long  # ~30 s on a loaded 2-core machine
def test_lora_under_mixed_bfloat16_trains_float32_adapters(tmp_path):
    with precision_policy("mixed_bfloat16"):
        keras.utils.set_random_seed(1)
        model = BertClassifier(bert_config(), num_labels=2,
                               dropout_rate=0.0).build_from_config_shapes()
        finetuning.init_model(model, None)
        base = {n: np.array(v) for n, v in finetuning.checkpoint_variable_map(model).items()}
        options = finetuning.FinetuneOptions(
            output_dir=str(tmp_path), learning_rate=1e-2, num_train_steps=24,
            num_warmup_steps=2, train_batch_size=16, progress=False, plot_curves=False,
            lora_rank=4, lora_alpha=8.0)
        result = finetuning.train_model(model, classifier_arrays(64), mean_loss, options)
    layers = lora.lora_layers(model)
    assert len(layers) == 2 * 2  # query and value of both blocks
    for path, layer in layers.items():
        assert layer.compute_dtype == "bfloat16", path
        for var in (layer.lora_kernel_a, layer.lora_kernel_b):
            assert var.dtype == "float32" and var.trainable, var.path
        assert np.abs(np.array(layer.lora_kernel_b)).max() > 0, path  # B starts at 0: trained
    adapters = {id(v) for layer in layers.values()
                for v in (layer.lora_kernel_a, layer.lora_kernel_b)}
    head = {id(v) for v in model.weights} - {id(v) for v in model.encoder.weights}
    assert {id(v) for v in model.trainable_variables} == adapters | head
    with lora.base_kernels(model):  # the frozen base is unchanged
        for name, var in finetuning.checkpoint_variable_map(model).items():
            if name.startswith("bert/"):
                np.testing.assert_array_equal(np.array(var), base[name], err_msg=name)
    losses = [r["loss"] for r in result["history"]]
    assert len(losses) == 24 and np.all(np.isfinite(losses))
    # falling: the last quarter's mean below the first quarter's (bfloat16 steps are noisy)
    assert np.mean(losses[-6:]) < np.mean(losses[:6]) - 0.05, losses
    ids = {k: tf.constant(v[:8]) for k, v in classifier_arrays(64).items()
           if k in finetuning.ENCODER_INPUT_KEYS}
    assert model(ids, training=False)["logits"].dtype == tf.float32


@pytest.mark.long  # two fresh processes: ~60-90 s on a loaded 2-core machine
def test_lora_mirrored_two_devices_equals_one_device(tmp_path):
    worker = os.path.join(HERE, "_strategy_worker.py")
    for args in (("lora", "one_device", tmp_path / "one"),
                 ("lora", "mirrored", tmp_path / "two", 2)):
        proc = subprocess.run([sys.executable, worker, *map(str, args)], capture_output=True,
                              text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-4000:]
    one, two = np.load(tmp_path / "one" / "lora.npz"), np.load(tmp_path / "two" / "lora.npz")
    assert sorted(one.files) == sorted(two.files)
    adapters = [n for n in one.files if n.endswith(("__lora_a", "__lora_b"))]
    assert len(adapters) == 2 * 2 * 3  # A and B of query, value, intermediate_dense, 2 blocks
    assert all(np.abs(one[n]).max() > 0 for n in adapters if n.endswith("__lora_b"))
    worst = max(float(np.max(np.abs(one[n] - two[n]))) for n in one.files)
    assert worst <= WEIGHT_TOLERANCE, worst
    np.testing.assert_allclose(np.load(tmp_path / "one" / "losses.npy"),
                               np.load(tmp_path / "two" / "losses.npy"), rtol=0, atol=1e-6)
