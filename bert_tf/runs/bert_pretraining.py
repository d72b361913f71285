"""`run_pretraining`: what tools/run_pretraining.py does, as a library function."""
from __future__ import annotations

import dataclasses
import json
import os

import keras
from absl import logging

from bert_tf.errors import UserInputError
from bert_tf.export import export_encoder_savedmodel
from bert_tf.modeling import BertConfig
from bert_tf.options import option
from bert_tf.pretraining_data.tfrecord_reader import expand_input_files, pretraining_dataset
from bert_tf.training.distribution import (DistributionOptions, check_global_batch,
                                           check_tpu_paths, create_strategy_from_options)
from bert_tf.training.pretraining_loop import PretrainingTrainer, TrainerOptions
from bert_tf.training.precision import runs_under_precision_policy


@dataclasses.dataclass(kw_only=True)
class PretrainingRun(DistributionOptions, TrainerOptions):
    """Every option of a pretraining run: the trainer's (`TrainerOptions`, passed to
    `PretrainingTrainer` as they are), the original's TPU flags (`DistributionOptions`) and the
    run's own. The docstring entries below are the flags' help (`bert_tf.cli`).

    Attributes:
      bert_config_file: The config json file corresponding to the pre-trained BERT model. This
        specifies the model architecture.
      input_file: Input TF example files (can be a glob or comma separated).
      output_dir: The output directory where the model checkpoints will be written.
      init_checkpoint: Initial checkpoint (usually from a pre-trained BERT model; original TF1
        names).
      max_seq_length: The maximum total input sequence length after WordPiece tokenization.
        Sequences longer than this will be truncated, and sequences shorter than this will be
        padded. Must match data generation.
      max_predictions_per_seq: Maximum number of masked LM predictions per sequence. Must match
        data generation.
      do_train: Whether to run training.
      do_eval: Whether to run eval on the dev set.
      train_batch_size: Total batch size for training.
      eval_batch_size: Total batch size for eval.
      learning_rate: The initial learning rate for Adam.
      num_train_steps: Number of training steps.
      num_warmup_steps: Number of warmup steps.
      save_checkpoints_steps: How often to save the model checkpoint.
      iterations_per_loop: How many steps to make in each host loop (and per progress line).
      max_eval_steps: Maximum number of eval steps.
      keep_checkpoint_max: How many recent training checkpoints to keep.
      jit_compile: XLA-compile the train step.
      last_layer_at_predictions_only: Compute the last transformer block only at [CLS] and the
        masked positions (same losses up to float rounding, +20% steps/s at L=4, seq 128);
        false = every position, as the original.
      xla_gelu: While training, compute the FFN's GELU as two XLA-compiled elementwise kernels
        (same values up to float rounding); false = TensorFlow's op-by-op GELU.
      optimizer: adamw = the original's AdamWeightDecay; lamb = LAMB.
      export_dir: Also export the trained encoder as a SavedModel here.
      seed: Seed for initialisation, dropout and input shuffling.
      plot_curves: Draw the training curves (TensorBoard scalars of output_dir/train) into
        output_dir/curves.png after training.
    """

    bert_config_file: str
    input_file: str
    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    do_train: bool = False
    do_eval: bool = False
    optimizer: str = option("adamw", choices=("adamw", "lamb"))
    export_dir: str | None = None
    seed: int = 12345
    plot_curves: bool = True


@runs_under_precision_policy()
def run_pretraining(run: PretrainingRun) -> dict:
    """Trains and/or evaluates as the flags say; returns {"train": records, "eval": metrics}."""
    if not (run.do_train or run.do_eval):
        raise UserInputError("at least one of --do_train or --do_eval must be True")
    config = BertConfig.from_json_file(run.bert_config_file)
    if run.max_seq_length > config.max_position_embeddings:
        raise UserInputError(f"--max_seq_length={run.max_seq_length} is longer than "
                             f"max_position_embeddings={config.max_position_embeddings} in "
                             f"{run.bert_config_file}")
    files = expand_input_files(run.input_file)
    if run.strategy_name == "tpu":
        check_tpu_paths(files, "--input_file")
        check_tpu_paths([run.output_dir], "--output_dir")
    # The strategy first: multi-worker collectives must be configured before TF runs any op.
    strategy = create_strategy_from_options(run)
    keras.utils.set_random_seed(run.seed)
    check_global_batch(run.train_batch_size, strategy, "--train_batch_size")
    check_global_batch(run.eval_batch_size, strategy, "--eval_batch_size")
    from bert_tf import io_utils

    io_utils.makedirs(run.output_dir)
    trainer = PretrainingTrainer(config, run, strategy)
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
        if run.plot_curves and trainer.is_chief:
            _plot_curves(run.output_dir)
    else:  # evaluation alone: the run's newest checkpoint, else --init_checkpoint's weights
        trainer.restore_or_initialize()
    if run.do_eval:
        result["eval"] = trainer.evaluate(input_fn(False, run.eval_batch_size), run.max_eval_steps)
        logging.info("Eval results: %s", json.dumps(result["eval"]))
    return result


def _plot_curves(output_dir: str) -> None:
    """output_dir/curves.png from the TensorBoard scalars (a by-product: never fails the run)."""
    import tensorflow as tf

    from bert_tf.plotting import plot_training_curves

    png = os.path.join(output_dir, "curves.png")
    try:
        plot_training_curves(os.path.join(output_dir, "train"), png,
                             title=f"pretraining: {output_dir}")
        logging.info("Training curves: %s", png)
    except (ImportError, OSError, ValueError, tf.errors.OpError) as e:
        logging.warning("could not draw %s: %s", png, e)
