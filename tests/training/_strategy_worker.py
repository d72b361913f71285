"""Trains a tiny BERT for 3 updates in a fresh process (logical CPU devices must be set up before
TF starts) under a strategy, for the tests that compare MirroredStrategy on 2 logical CPUs with
one device:

- CASE `lora` (tests/training/test_lora_precision_distributed.py): fine-tunes a tiny classifier
  (dropout 0) with LoRA (rank 2 on query/value/intermediate_dense); saves the run's final weights
  (base, adapters, head; by checkpoint name) to OUTPUT_DIR/lora.npz and the losses to
  OUTPUT_DIR/losses.npy.
- CASE `accumulation` (tests/training/test_accumulation.py): fine-tunes the classifier and
  pretrains a tiny BERT with ACCUMULATION_STEPS-step gradient accumulation; saves the trained
  weights to OUTPUT_DIR/{finetuning,pretraining}.npz.

usage: _strategy_worker.py lora STRATEGY OUTPUT_DIR [NUM_CPU_DEVICES]
       _strategy_worker.py accumulation STRATEGY OUTPUT_DIR ACCUMULATION_STEPS [NUM_CPU_DEVICES]
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(__file__))
import tensorflow as tf  # noqa: E402
from _worker_devices import set_up_devices  # noqa: E402

case, strategy_name, output_dir, *rest = sys.argv[1:]
if case not in ("lora", "accumulation"):
    sys.exit(f"_strategy_worker.py: CASE must be lora or accumulation, got {case!r}")
k = int(rest.pop(0)) if case == "accumulation" else None
n_cpu = int(rest[0]) if rest else 1
set_up_devices(strategy_name, n_cpu)

import keras  # noqa: E402
import numpy as np  # noqa: E402

from test_accumulation import (bert_config, bert_pretraining_dataset,  # noqa: E402
                               classifier_arrays, mean_loss)

from bert_tf.modeling import BertClassifier  # noqa: E402
from bert_tf.training import finetuning  # noqa: E402
from bert_tf.training.distribution import create_strategy  # noqa: E402
from bert_tf.training.pretraining_loop import PretrainingTrainer, TrainerOptions  # noqa: E402


def save_npz(name, weights):
    """`weights` ({path: variable}) to OUTPUT_DIR/name, "/" in the paths as "__"."""
    np.savez(os.path.join(output_dir, name),
             **{n.replace("/", "__"): np.array(v) for n, v in weights.items()})


devices = [d.name for d in tf.config.list_logical_devices("CPU")]
strategy = create_strategy(strategy_name, devices=devices if strategy_name == "mirrored" else None)
os.makedirs(output_dir, exist_ok=True)

keras.utils.set_random_seed(1)
with strategy.scope():
    model = BertClassifier(bert_config(), num_labels=2, dropout_rate=0.0).build_from_config_shapes()
if case == "lora":
    case_options = dict(learning_rate=1e-2, lora_rank=2, lora_alpha=4.0,
                        lora_targets=["query", "value", "intermediate_dense"])
else:
    case_options = dict(learning_rate=1e-3, gradient_accumulation_steps=k)
options = finetuning.FinetuneOptions(
    output_dir=os.path.join(output_dir, "ft"), num_train_steps=3, num_warmup_steps=1,
    train_batch_size=16, progress=False, plot_curves=False, **case_options)
result = finetuning.train_model(model, classifier_arrays(64), mean_loss, options,
                                strategy=strategy)
if case == "lora":
    np.save(os.path.join(output_dir, "losses.npy"), [r["loss"] for r in result["history"]])
    save_npz("lora.npz", finetuning.lora_variable_map(model, finetuning.checkpoint_variable_map))
else:
    save_npz("finetuning.npz", finetuning.checkpoint_variable_map(model))
    keras.utils.set_random_seed(2)
    trainer = PretrainingTrainer(bert_config(), TrainerOptions(
        output_dir=os.path.join(output_dir, "pt"), train_batch_size=8, learning_rate=1e-3,
        num_train_steps=3, num_warmup_steps=1, save_checkpoints_steps=100, iterations_per_loop=3,
        gradient_accumulation_steps=k, xla_gelu=False), strategy)
    trainer.train(bert_pretraining_dataset)
    save_npz("pretraining.npz", {v.path: v for v in trainer.model.trainable_variables})
print("done")
