"""The fine-tuning loop under tf.distribute: MirroredStrategy over 2 logical CPUs and
MultiWorkerMirroredStrategy over 2 local processes give the one-device losses at the same global
batch, with dropout 0.1 (the original release's tiny fixture BERT, real MRPC pairs). Each run is a
fresh process (`_finetune_worker.py`): logical devices and collectives are set up before TF
starts."""
import json
import os
import subprocess
import sys

import pytest

from tests.helpers import run_local_workers

WORKER = os.path.join(os.path.dirname(__file__), "_finetune_worker.py")


def _env(original_fixtures, shared_data, **extra):
    return dict(os.environ, BERT_TF_FIXTURES=str(original_fixtures),
                BERT_TF_DATA=str(shared_data), TF_CPP_MIN_LOG_LEVEL="2", **extra)


def _run(original_fixtures, shared_data, *args):
    proc = subprocess.run([sys.executable, WORKER, *map(str, args)], capture_output=True,
                          text=True, env=_env(original_fixtures, shared_data), timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def one_device(original_fixtures, shared_data, tmp_path_factory):
    return _run(original_fixtures, shared_data, "one_device", tmp_path_factory.mktemp("one"))


def _assert_same_losses(reference, other, tolerance):
    assert [r["step"] for r in other] == [r["step"] for r in reference] == [1, 2, 3, 4, 5, 6]
    for a, b in zip(reference, other):
        for key in ("loss", "grad_norm", "learning_rate"):
            assert b[key] == pytest.approx(a[key], abs=tolerance), (a["step"], key, a, b)


def test_one_device_run_trains_with_dropout(one_device):
    assert one_device[-1]["loss"] < one_device[0]["loss"]


@pytest.mark.long
def test_mirrored_two_replicas_equals_one_device(original_fixtures, shared_data, tmp_path,
                                                 one_device):
    mirrored = _run(original_fixtures, shared_data, "mirrored", tmp_path / "mirrored", 2)
    _assert_same_losses(one_device, mirrored, 1e-5)
    assert os.path.exists(tmp_path / "mirrored" / "model.ckpt-6.index")


@pytest.mark.long
def test_multi_worker_two_processes_agree(original_fixtures, shared_data, tmp_path, one_device,
                                          local_workers):
    outputs = run_local_workers(
        [sys.executable, WORKER, "multi_worker_mirrored", str(tmp_path / "mw")], local_workers,
        _env(original_fixtures, shared_data))
    _assert_same_losses(one_device, outputs[0], 1e-5)
    _assert_same_losses(outputs[0], outputs[1], 1e-6)
    # only the chief writes checkpoints
    assert os.path.exists(tmp_path / "mw" / "shared" / "model.ckpt-6.index")


_EARLY_ERRORS = r"""
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow as tf
cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)
import numpy as np
from bert_tf.modeling import BertClassifier, BertConfig
from bert_tf.training import finetuning
from bert_tf.training.distribution import create_strategy

strategy = create_strategy("mirrored", devices=[d.name for d in tf.config.list_logical_devices("CPU")])
config = BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=16, max_position_embeddings=8)
ids = np.ones((8, 4), np.int32)
arrays = {"input_word_ids": ids, "input_mask": ids, "input_type_ids": ids * 0,
          "label_ids": np.zeros(8, np.int32)}
loss = lambda outputs, batch: tf.reduce_mean(outputs["logits"])

def options(batch):
    return finetuning.FinetuneOptions(output_dir=sys.argv[1], learning_rate=1e-3,
                                      num_train_steps=1, num_warmup_steps=0,
                                      train_batch_size=batch, progress=False, plot_curves=False)

outside = BertClassifier(config, num_labels=2).build_from_config_shapes()
for model, batch in ((outside, 8), (None, 7)):
    if model is None:
        with strategy.scope():
            model = BertClassifier(config, num_labels=2).build_from_config_shapes()
    try:
        finetuning.train_model(model, arrays, loss, options(batch), strategy=strategy)
    except Exception as e:
        print(type(e).__name__ + ": " + str(e))
"""


@pytest.mark.long
def test_early_errors_under_a_strategy(tmp_path):
    """A model built outside the strategy's scope, and a global batch the replicas cannot share,
    are one clear error each, before anything is written."""
    proc = subprocess.run([sys.executable, "-c", _EARLY_ERRORS, str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()[-2:]
    assert lines[0].startswith("ValueError: the model's variables were not created under the "
                               "MirroredStrategy's scope"), lines
    assert "--train_batch_size=7 is not divisible by the 2 replicas" in lines[1], lines
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())
