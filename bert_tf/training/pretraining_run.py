"""`run_pretraining`: what tools/run_pretraining.py does, as a library function."""
from __future__ import annotations

import dataclasses
import json
import os

import keras
from absl import logging

from bert_tf.pretraining_data.tfrecord_reader import expand_input_files, pretraining_dataset
from bert_tf.export import export_encoder_savedmodel
from bert_tf.modeling import BertConfig
from bert_tf.training.distribution import (check_global_batch, check_tpu_paths,
                                           create_strategy)
from bert_tf.training.pretraining_loop import PretrainingTrainer, TrainerOptions, set_mixed_precision


@dataclasses.dataclass
class PretrainingRun:
    """Every option of a pretraining run (the original flags plus strategy/precision/optimizer)."""

    bert_config_file: str
    input_file: str
    output_dir: str
    init_checkpoint: str | None = None
    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    do_train: bool = False
    do_eval: bool = False
    train_batch_size: int = 32
    eval_batch_size: int = 8
    learning_rate: float = 5e-5
    num_train_steps: int = 100000
    num_warmup_steps: int = 10000
    save_checkpoints_steps: int = 1000
    iterations_per_loop: int = 1000
    max_eval_steps: int = 100
    keep_checkpoint_max: int = 5
    distribution_strategy: str = "one_device"
    tpu_name: str | None = None
    tpu_zone: str | None = None
    gcp_project: str | None = None
    master: str | None = None
    mixed_precision: str = "float32"
    jit_compile: bool = False
    last_layer_at_predictions_only: bool = True
    xla_gelu: bool = True
    optimizer: str = "adamw"
    export_dir: str | None = None
    seed: int = 12345


def run_pretraining(run: PretrainingRun) -> dict:
    """Trains and/or evaluates as the flags say; returns {"train": records, "eval": metrics}."""
    if not (run.do_train or run.do_eval):
        raise ValueError("at least one of --do_train or --do_eval must be True")
    config = BertConfig.from_json_file(run.bert_config_file)
    if run.max_seq_length > config.max_position_embeddings:
        raise ValueError(f"--max_seq_length={run.max_seq_length} is longer than "
                         f"max_position_embeddings={config.max_position_embeddings} in "
                         f"{run.bert_config_file}")
    files = expand_input_files(run.input_file)
    if run.distribution_strategy == "tpu":
        check_tpu_paths(files, "--input_file")
        check_tpu_paths([run.output_dir], "--output_dir")
    # The strategy first: multi-worker collectives must be configured before TF runs any op.
    strategy = create_strategy(run.distribution_strategy, tpu_name=run.tpu_name,
                               tpu_zone=run.tpu_zone, gcp_project=run.gcp_project,
                               master=run.master)
    set_mixed_precision(run.mixed_precision)
    keras.utils.set_random_seed(run.seed)
    check_global_batch(run.train_batch_size, strategy, "--train_batch_size")
    check_global_batch(run.eval_batch_size, strategy, "--eval_batch_size")
    os.makedirs(run.output_dir, exist_ok=True)
    options = TrainerOptions(
        output_dir=run.output_dir, train_batch_size=run.train_batch_size,
        eval_batch_size=run.eval_batch_size, learning_rate=run.learning_rate,
        num_train_steps=run.num_train_steps, num_warmup_steps=run.num_warmup_steps,
        save_checkpoints_steps=run.save_checkpoints_steps,
        iterations_per_loop=run.iterations_per_loop, max_eval_steps=run.max_eval_steps,
        keep_checkpoint_max=run.keep_checkpoint_max, optimizer=run.optimizer,
        jit_compile=run.jit_compile, init_checkpoint=run.init_checkpoint,
        last_layer_at_predictions_only=run.last_layer_at_predictions_only,
        xla_gelu=run.xla_gelu)
    trainer = PretrainingTrainer(config, options, strategy)
    result: dict = {}

    def input_fn(is_training: bool, global_batch: int):
        def dataset_fn(ctx):
            return pretraining_dataset(
                files, max_seq_length=run.max_seq_length,
                max_predictions_per_seq=run.max_predictions_per_seq,
                batch_size=ctx.get_per_replica_batch_size(global_batch), is_training=is_training,
                input_context=ctx, seed=run.seed)
        return dataset_fn

    if run.do_train:
        result["train"] = trainer.train(input_fn(True, run.train_batch_size))
        prefix = trainer.export_original_checkpoint()
        logging.info("Wrote the original-format checkpoint %s", prefix)
        if run.export_dir:
            export_encoder_savedmodel(trainer.model.encoder, run.export_dir, overwrite=True)
            logging.info("Exported the encoder SavedModel to %s", run.export_dir)
    elif run.init_checkpoint or trainer._manager is None:
        trainer._setup_checkpoints()
        trainer._restore_or_initialize()
    if run.do_eval:
        result["eval"] = trainer.evaluate(input_fn(False, run.eval_batch_size), run.max_eval_steps)
        logging.info("Eval results: %s", json.dumps(result["eval"]))
    return result
