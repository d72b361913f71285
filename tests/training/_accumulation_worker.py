"""Fine-tunes a tiny BERT classifier (dropout 0) and pretrains a tiny BERT for 3 updates in a
fresh process (logical CPU devices must be set up before TF starts), with gradient
accumulation, under a strategy; saves the trained weights to OUTPUT_DIR/{finetuning,pretraining}.npz.

usage: _accumulation_worker.py STRATEGY OUTPUT_DIR ACCUMULATION_STEPS [NUM_CPU_DEVICES]
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402

strategy_name, output_dir, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
n_cpu = int(sys.argv[4]) if len(sys.argv) > 4 else 1
cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(
    cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(n_cpu)])

import keras  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from test_accumulation import (bert_config, bert_pretraining_dataset,  # noqa: E402
                               classifier_arrays, mean_loss)

from bert_tf.modeling import BertClassifier  # noqa: E402
from bert_tf.training import finetuning  # noqa: E402
from bert_tf.training.distribution import create_strategy  # noqa: E402
from bert_tf.training.pretraining_loop import PretrainingTrainer, TrainerOptions  # noqa: E402

devices = [d.name for d in tf.config.list_logical_devices("CPU")]
strategy = create_strategy(strategy_name, devices=devices if strategy_name == "mirrored" else None)
os.makedirs(output_dir, exist_ok=True)

keras.utils.set_random_seed(1)
with strategy.scope():
    model = BertClassifier(bert_config(), num_labels=2, dropout_rate=0.0).build_from_config_shapes()
options = finetuning.FinetuneOptions(
    output_dir=os.path.join(output_dir, "ft"), learning_rate=1e-3, num_train_steps=3,
    num_warmup_steps=1, train_batch_size=16, progress=False, plot_curves=False,
    gradient_accumulation_steps=k)
finetuning.train_model(model, classifier_arrays(64), mean_loss, options, strategy=strategy)
np.savez(os.path.join(output_dir, "finetuning.npz"),
         **{n.replace("/", "__"): np.array(v)
            for n, v in finetuning.checkpoint_variable_map(model).items()})

keras.utils.set_random_seed(2)
trainer = PretrainingTrainer(bert_config(), TrainerOptions(
    output_dir=os.path.join(output_dir, "pt"), train_batch_size=8, learning_rate=1e-3,
    num_train_steps=3, num_warmup_steps=1, save_checkpoints_steps=100, iterations_per_loop=3,
    gradient_accumulation_steps=k, xla_gelu=False), strategy)
trainer.train(bert_pretraining_dataset)
np.savez(os.path.join(output_dir, "pretraining.npz"),
         **{v.path.replace("/", "__"): np.array(v) for v in trainer.model.trainable_variables})
print("done")
