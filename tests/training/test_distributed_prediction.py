"""Prediction and evaluation run through `strategy.run` as training does: MirroredStrategy over
2 logical CPUs (and MultiWorkerMirroredStrategy over 2 local processes) predicts real MRPC dev
pairs as one device does (1e-5), the last partial batch included (21 rows in batches of 8: 8, 8,
5), rows in example order. A fresh process
(`_predict_worker.py`): logical devices are set up before TF starts."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import run_local_workers

WORKER = os.path.join(os.path.dirname(__file__), "_predict_worker.py")


@pytest.mark.slow  # a fresh TF process and three models: ~30 s on the shared machine
def test_mirrored_prediction_equals_one_device(original_fixtures, shared_data):
    env = dict(os.environ, BERT_TF_FIXTURES=str(original_fixtures),
               BERT_TF_DATA=str(shared_data), TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, WORKER, "21", "8"], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["replicas"] == 2
    one_device, mirrored = np.array(out["one_device"]), np.array(out["mirrored"])
    assert one_device.shape == mirrored.shape == (21, 2)
    np.testing.assert_allclose(mirrored, one_device, atol=1e-5, rtol=0)
    # Not all rows alike (the comparison could not pass with rows out of order).
    assert np.ptp(one_device[:, 1] - one_device[:, 0]) > 1e-3
    # The same evaluation figure: accuracy of the argmax on the 21 labelled rows.
    labels = np.array(out["labels"])
    assert (mirrored.argmax(-1) == labels).mean() == (one_device.argmax(-1) == labels).mean()
    # A global batch the 2 replicas cannot share is one clear error naming the flag.
    assert out["odd_batch_error"] is not None and "--predict_batch_size" in out["odd_batch_error"]


@pytest.mark.slow  # two fresh TF processes: ~50 s on the shared machine
def test_multi_worker_prediction_equals_one_device_on_every_worker(original_fixtures,
                                                                   shared_data, local_workers):
    """MultiWorkerMirroredStrategy over 2 local processes: each worker predicts its share of
    every global batch, and strategy.gather gives every worker all 21 rows in order."""
    for result in run_local_workers(
            [sys.executable, WORKER, "21", "8", "multi_worker_mirrored"], local_workers,
            dict(os.environ, BERT_TF_FIXTURES=str(original_fixtures),
                 BERT_TF_DATA=str(shared_data), TF_CPP_MIN_LOG_LEVEL="2")):
        assert result["replicas"] == 2
        np.testing.assert_allclose(np.array(result["mirrored"]), np.array(result["one_device"]),
                                   atol=1e-5, rtol=0)
        assert np.array(result["mirrored"]).shape == (21, 2)


def test_one_replica_strategy_path_keeps_order_and_the_last_partial_batch():
    """In process (cheap): the strategy.run path on one replica (the default strategy, and an
    explicit OneDeviceStrategy) gives each row's own logits, 11 rows in batches of 4 (4, 4, 3)."""
    import keras
    import tensorflow as tf

    from bert_tf.modeling import BertClassifier, BertConfig
    from bert_tf.training import finetuning

    config = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=16,
                        type_vocab_size=2, hidden_dropout_prob=0.1,
                        attention_probs_dropout_prob=0.1)
    keras.utils.set_random_seed(3)
    model = BertClassifier(config, num_labels=2).build_from_config_shapes()
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 50, size=(11, 12)).astype(np.int32)
    mask = (np.arange(12)[None, :] < rng.integers(3, 13, size=(11, 1))).astype(np.int32)
    arrays = {"input_word_ids": ids * mask, "input_mask": mask,
              "input_type_ids": np.zeros_like(ids)}
    assert finetuning.model_strategy(model) is tf.distribute.get_strategy()
    default = finetuning.predict_arrays(model, arrays, 4, ["logits"], progress=False,
                                        length_bucketing=False)["logits"]
    explicit = finetuning.predict_arrays(model, arrays, 4, ["logits"], progress=False,
                                         strategy=tf.distribute.OneDeviceStrategy("/cpu:0"))
    assert default.shape == (11, 2)
    rows = np.concatenate([np.array(model({k: v[i:i + 1] for k, v in arrays.items()},
                                          training=False)["logits"]) for i in range(11)])
    np.testing.assert_allclose(default, rows, atol=1e-5, rtol=0)
    np.testing.assert_allclose(explicit["logits"], rows, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="no outputs"):
        finetuning.predict_arrays(model, arrays, 4, ["start_logits"], progress=False,
                                  length_bucketing=False)
