"""Runs a short pretraining in a fresh process (logical CPU devices must be set up before TF
starts). Prints the per-step records as JSON on the last line of stdout.

usage: _pretrain_worker.py STRATEGY OUTPUT_DIR STOP_AFTER [NUM_CPU_DEVICES]
env: BERT_TF_FIXTURES (required), BERT_TF_POLICY (precision policy), BERT_TF_DROPOUT (dropout rate
of every dropout layer; default the fixture config's 0).
"""
import dataclasses
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(__file__))
import tensorflow as tf  # noqa: E402
from _worker_devices import set_up_devices  # noqa: E402

strategy_name, output_dir, stop_after = sys.argv[1], sys.argv[2], int(sys.argv[3])
n_cpu = int(sys.argv[4]) if len(sys.argv) > 4 else 1
early_strategy = set_up_devices(strategy_name, n_cpu)

import keras  # noqa: E402

from bert_tf.modeling import BertConfig  # noqa: E402
from bert_tf.training.distribution import create_strategy  # noqa: E402
from bert_tf.training.precision import set_mixed_precision  # noqa: E402
from bert_tf.training.pretraining_loop import PretrainingTrainer, TrainerOptions  # noqa: E402

set_mixed_precision(os.environ.get("BERT_TF_POLICY", "float32"))

FIXTURES = os.environ["BERT_TF_FIXTURES"]
FEATURES = {
    "input_ids": tf.io.FixedLenFeature([128], tf.int64),
    "input_mask": tf.io.FixedLenFeature([128], tf.int64),
    "segment_ids": tf.io.FixedLenFeature([128], tf.int64),
    "masked_lm_positions": tf.io.FixedLenFeature([20], tf.int64),
    "masked_lm_ids": tf.io.FixedLenFeature([20], tf.int64),
    "masked_lm_weights": tf.io.FixedLenFeature([20], tf.float32),
    "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
}


def dataset_fn(ctx):
    def decode(record):
        ex = tf.io.parse_single_example(record, FEATURES)
        return {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in ex.items()}
    ds = tf.data.TFRecordDataset(os.path.join(FIXTURES, "pretraining_data", "run1.tfrecord"))
    ds = ds.map(decode).repeat().shuffle(20, seed=7)
    # shard after batching: global batch k is the same 8 examples whatever the number of workers
    ds = ds.batch(ctx.get_per_replica_batch_size(8), drop_remainder=True)
    return ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)


devices = [d.name for d in tf.config.list_logical_devices("CPU")]
strategy = early_strategy or create_strategy(
    strategy_name, devices=devices if strategy_name == "mirrored" else None)
if strategy_name == "multi_worker_mirrored":  # each worker process writes its own output_dir
    output_dir = os.path.join(output_dir, "shared")
config = BertConfig.from_json_file(os.path.join(FIXTURES, "optimizer", "bert_config_no_dropout.json"))
if os.environ.get("BERT_TF_DROPOUT"):  # the real configs' dropout (0.1)
    rate = float(os.environ["BERT_TF_DROPOUT"])
    config = dataclasses.replace(config, hidden_dropout_prob=rate,
                                 attention_probs_dropout_prob=rate)
    keras.utils.set_random_seed(12345)  # as tools/run_pretraining.py
options = TrainerOptions(output_dir=output_dir, train_batch_size=8, learning_rate=1e-4,
                         num_train_steps=10, num_warmup_steps=2, save_checkpoints_steps=3,
                         iterations_per_loop=2,
                         init_checkpoint=os.path.join(FIXTURES, "checkpoint", "bert_model.ckpt"))
trainer = PretrainingTrainer(config, options, strategy)
records = trainer.train(dataset_fn, stop_after_step=stop_after)
print(json.dumps(records))
