"""Fine-tunes a tiny BERT classifier (dropout 0) with LoRA (rank 2 on query/value/
intermediate_dense) for 3 updates in a fresh process (logical CPU devices must be set up
before TF starts) under a strategy; saves the run's final weights (base, adapters, head; by
checkpoint name) to OUTPUT_DIR/lora.npz and the losses to OUTPUT_DIR/losses.npy.

usage: _lora_worker.py STRATEGY OUTPUT_DIR [NUM_CPU_DEVICES]
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402

strategy_name, output_dir = sys.argv[1], sys.argv[2]
n_cpu = int(sys.argv[3]) if len(sys.argv) > 3 else 1
cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(
    cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(n_cpu)])

import keras  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from test_accumulation import bert_config, classifier_arrays, mean_loss  # noqa: E402

from bert_tf.modeling import BertClassifier  # noqa: E402
from bert_tf.training import finetuning  # noqa: E402
from bert_tf.training.distribution import create_strategy  # noqa: E402

devices = [d.name for d in tf.config.list_logical_devices("CPU")]
strategy = create_strategy(strategy_name, devices=devices if strategy_name == "mirrored" else None)
os.makedirs(output_dir, exist_ok=True)

keras.utils.set_random_seed(1)
with strategy.scope():
    model = BertClassifier(bert_config(), num_labels=2, dropout_rate=0.0).build_from_config_shapes()
options = finetuning.FinetuneOptions(
    output_dir=os.path.join(output_dir, "ft"), learning_rate=1e-2, num_train_steps=3,
    num_warmup_steps=1, train_batch_size=16, progress=False, plot_curves=False,
    lora_rank=2, lora_alpha=4.0, lora_targets=["query", "value", "intermediate_dense"])
result = finetuning.train_model(model, classifier_arrays(64), mean_loss, options,
                                strategy=strategy)
np.save(os.path.join(output_dir, "losses.npy"), [r["loss"] for r in result["history"]])
weights = finetuning.lora_variable_map(model, finetuning.checkpoint_variable_map)
np.savez(os.path.join(output_dir, "lora.npz"),
         **{n.replace("/", "__"): np.array(v) for n, v in weights.items()})
print("done")
