"""Pretraining data: raw text -> masked-LM / next-sentence tf.train.Examples (TFRecords).

* `create_pretraining_data` (faithful mode): the original script's exact output and order.
* `create_pretraining_data_sharded` (scalable mode): sharded, multi-process, bounded memory,
  resumable, deterministic for a seed whatever the number of workers.
* GPT-1's language-model windows: `bert_tf.pretraining_data.gpt_lm` (`create_gpt_lm_data`).
  It and scalable mode run on one engine, `bert_tf.pretraining_data.sharding` (shard files,
  resume and refusal rules, the worker pool, progress).
* Building blocks: `PretrainingDataOptions`, `create_training_instances`,
  `create_instances_from_document`, `create_masked_lm_predictions`, `truncate_seq_pair`,
  `ExampleEncoder`, `TracingRandom` (records the RNG calls for comparison with the original).

The reader for these files (the original `run_pretraining` input_fn) is `bert_tf.pretraining_data.tfrecord_reader`.
Nothing here imports TensorFlow except `tfrecord_reader.py` (not imported by this package).
"""
from bert_tf.pretraining_data.faithful import create_pretraining_data, load_tokenizer
from bert_tf.pretraining_data.instances import InstanceStats, TrainingInstance, \
    create_instances_from_document, create_training_instances, truncate_seq_pair
from bert_tf.pretraining_data.masking import VocabInfo, create_masked_lm_predictions
from bert_tf.pretraining_data.options import PretrainingDataError, PretrainingDataOptions
from bert_tf.pretraining_data.rng import ScalableRandom, TracingRandom, shard_seed
from bert_tf.pretraining_data.scalable import create_pretraining_data_sharded
from bert_tf.pretraining_data.writer import FEATURE_NAMES, ExampleEncoder, parse_example, \
    read_tfrecord

__all__ = [
    "FEATURE_NAMES",
    "ExampleEncoder",
    "InstanceStats",
    "PretrainingDataError",
    "PretrainingDataOptions",
    "ScalableRandom",
    "TracingRandom",
    "TrainingInstance",
    "VocabInfo",
    "create_instances_from_document",
    "create_masked_lm_predictions",
    "create_pretraining_data",
    "create_pretraining_data_sharded",
    "create_training_instances",
    "load_tokenizer",
    "parse_example",
    "read_tfrecord",
    "shard_seed",
    "truncate_seq_pair",
]
