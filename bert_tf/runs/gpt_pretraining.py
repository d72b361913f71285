"""GPT-1 language-model pretraining with the BERT pretraining loop.

`GptPretrainingTrainer` is `bert_tf.training.pretraining_loop.PretrainingTrainer` (one code path for
every tf.distribute strategy, checkpoints with weights + optimizer slots + step + dropout random
streams, exact resume by re-creating the seeded input and skipping the consumed batches, progress
with ETA, TensorBoard scalars) with GPT-1's model, objective and optimizer plugged into its hooks:

- model: `GptModel(classifier=False)`; inputs are the contiguous `n_ctx` windows of
  `bert_tf.pretraining_data.gpt_lm` ({"token_ids": int32 [batch, n_ctx]});
- objective: the LM loss as train.py computes it, the mean over every predicted token (position i
  predicts token i + 1; windows are full, so this is also train.py's mean of per-sequence means);
  under n replicas each replica's share is its token-loss sum / the global number of tokens, so
  the summed loss is the global batch's exactly;
- optimizer: the original `OpenAIAdam` (L2 inside the step, `vector_l2`, schedules
  warmup_linear / warmup_cosine / warmup_constant over `t_total = num_train_steps`, the first
  update at lr 0; `fused=True`: one ResourceApplyAdam kernel per variable, equal to the
  op-by-op update within the fixture tolerances); the loop clips the all-reduced gradients to
  `max_grad_norm` (the optimizer's own clip is off, so they are clipped once);
- evaluation: held-out LM loss and perplexity = exp(token-weighted mean LM loss over the held-out
  windows), next-token accuracy;
- weights out: an original params folder (`params_shapes.json` + `params_0..9.npy`) that train.py
  and `load_original_params` read, plus the trained special-token rows (`special_rows.npy`, which
  that layout has no place for) and the run's `config.json`, so that
  `GptCausalLM.from_pretrained(output_dir)` loads exactly the trained model; weights in (`init_checkpoint`): such a folder, or one of our
  training checkpoints (a `training_checkpoints` folder or a `ckpt-N` prefix).
"""
from __future__ import annotations

import dataclasses
import math
import os

import keras
import tensorflow as tf
from absl import logging

from bert_tf.errors import UserInputError
from bert_tf.gpt.config import GptConfig
from bert_tf.gpt.losses import lm_token_losses
from bert_tf.gpt.model import GptModel
from bert_tf.training.openai_adam import OpenAIAdamOptions, lr_schedule_option
from bert_tf.checkpoints.openai import (SHAPES_FILE, SPECIAL_ROWS_FILE, load_original_params,
                                        write_original_outputs)
from bert_tf.training.distribution import (DistributionOptions, check_global_batch,
                                           check_tpu_paths, create_strategy_from_options)
from bert_tf.training.accumulation import micro_batch_totals
from bert_tf.training.pretraining_loop import PretrainingLoopOptions, PretrainingTrainer
from bert_tf.training.precision import runs_under_precision_policy

__all__ = ["GptTrainerOptions", "GptPretrainingTrainer", "GptPretrainingRun", "load_gpt_weights",
           "lm_input_fn", "run_gpt_pretraining", "ORIGINAL_PARAMS_DIR", "SPECIAL_ROWS_FILE",
           "write_original_outputs"]

ORIGINAL_PARAMS_DIR = "original_params"
"""Folder under output_dir where the trained weights are written in the original layout."""

@dataclasses.dataclass
class GptTrainerOptions(OpenAIAdamOptions, PretrainingLoopOptions):
    """The pretraining loop's options plus the original optimizer's flags (train.py's names,
    `OpenAIAdamOptions`).
    BERT's model and optimizer choices (`TrainerOptions.optimizer`,
    `last_layer_at_predictions_only`, `xla_gelu`) are not GPT's and not among them.

    Attributes (besides PretrainingLoopOptions'):
      lr_schedule: warmup_linear, warmup_cosine or warmup_constant (train.py's --lr_schedule; the
        paper pretrains with cosine annealing after a linear warm-up).
      lr_warmup: warm-up as a fraction of num_train_steps (train.py's --lr_warmup); None =
        num_warmup_steps / num_train_steps.
      l2, vector_l2, max_grad_norm, b1, b2, e: train.py's flags of the same names
        (max_grad_norm <= 0: no clipping).
    """

    learning_rate: float = 2.5e-4
    lr_schedule: str = lr_schedule_option("warmup_cosine")
    lr_warmup: float | None = None

    @property
    def warmup_fraction(self) -> float:
        if self.lr_warmup is not None:
            return float(self.lr_warmup)
        return self.num_warmup_steps / max(self.num_train_steps, 1)

    def validate(self) -> None:
        """UserInputError naming the flag when a value cannot be used."""
        self.check_lr_schedule()
        if self.num_train_steps <= 0:
            raise UserInputError(f"--num_train_steps={self.num_train_steps} must be positive")
        if not 0.0 <= self.warmup_fraction <= 1.0:
            raise UserInputError(f"--lr_warmup / --num_warmup_steps give a warm-up fraction "
                                 f"{self.warmup_fraction}; expected a value in [0, 1]")
        if not self.learning_rate > 0:
            raise UserInputError(f"--learning_rate={self.learning_rate} must be positive")


def load_gpt_weights(model: GptModel, init_checkpoint: str) -> str:
    """Loads `init_checkpoint` into `model` (its transformer weights); returns what it was.

    Accepts an original params folder (params_shapes.json + params_0..9.npy: loaded as train.py
    loads it, with n_transfer = the model's layers and the special rows drawn afresh) -> "original",
    or one of our pretraining checkpoints (a `ckpt-N` prefix or a folder with a `checkpoint` state
    file, e.g. `<output_dir>/training_checkpoints`) -> "checkpoint".
    Raises UserInputError naming the path when it is neither.
    """
    path = os.fspath(init_checkpoint)
    if tf.io.gfile.exists(os.path.join(path, SHAPES_FILE)):
        load_original_params(model, path, n_transfer=model.config.n_layer)
        return "original"
    prefix = tf.train.latest_checkpoint(path) if tf.io.gfile.isdir(path) else path
    if not prefix or not tf.io.gfile.exists(prefix + ".index"):
        raise UserInputError(
            f"--init_checkpoint={path}: neither an original GPT-1 params folder (with "
            f"{SHAPES_FILE}) nor a GPT pretraining checkpoint (a ckpt-N prefix or a folder with "
            "a 'checkpoint' file)")
    status = tf.train.Checkpoint(gpt=gpt_weights_trackable(model)).restore(prefix)
    try:
        status.expect_partial().assert_existing_objects_matched()
    except (AssertionError, ValueError) as e:
        raise UserInputError(f"--init_checkpoint={prefix}: does not fit this GPT model "
                             f"({str(e).splitlines()[0]})") from None
    return "checkpoint"


def gpt_weights_trackable(model: GptModel) -> tf.train.Checkpoint:
    """The model's weights under their original names (`model/we`, `model/h0/attn/c_attn/w`,
    ...) as one trackable: added to the training checkpoint as `gpt`, so that the weights can be
    read back by name (a Keras 3 model's Python list of blocks is not part of TF's object graph;
    the optimizer's variable list alone would reach them)."""
    root = tf.train.Checkpoint()
    root.weights = {name: v.value if isinstance(getattr(v, "value", None), tf.Variable) else v
                    for name, v in model.original_variables()}
    return root


def lm_eval_sums(lm_logits: tf.Tensor, token_ids: tf.Tensor) -> dict[str, tf.Tensor]:
    """Held-out LM sums of one batch: every next-token prediction counted.

    Args: lm_logits float [B, S-1, rows]; token_ids int [B, S].
    Returns {"nll_sum", "correct_sum", "token_count"}, float32 scalars (perplexity =
    exp(nll_sum / token_count) over all batches).
    """
    logits = tf.cast(lm_logits, tf.float32)
    targets = tf.cast(token_ids[..., 1:], tf.int32)
    token_losses = lm_token_losses(logits, token_ids)
    correct = tf.equal(tf.argmax(logits, -1, output_type=tf.int32), targets)
    return {"nll_sum": tf.reduce_sum(token_losses),
            "correct_sum": tf.reduce_sum(tf.cast(correct, tf.float32)),
            "token_count": tf.cast(tf.size(token_losses), tf.float32)}


class GptPretrainingTrainer(PretrainingTrainer):
    """Trains `GptModel` as a language model (see the module docstring) under a strategy.

    Args:
      config: the `GptConfig`.
      options: `GptTrainerOptions`.
      strategy: a tf.distribute strategy (default: the current one).

    The train input is `dataset_fn(ctx) -> tf.data.Dataset` of {"token_ids": int32
    [per_replica_batch, n_ctx]}, repeated and deterministic for its seed (`lm_input_fn`).
    """

    loss_keys = ("loss",)

    def __init__(self, config: GptConfig, options: GptTrainerOptions,
                 strategy: tf.distribute.Strategy | None = None):
        options.validate()
        self.clip_norm = options.max_grad_norm if options.max_grad_norm > 0 else None
        super().__init__(config, options, strategy)

    # ---- hooks of PretrainingTrainer ---------------------------------------------------------
    def checkpoint_objects(self) -> dict[str, object]:
        """The loop's objects plus the weights under their original names (`gpt`)."""
        return {**super().checkpoint_objects(), "gpt": gpt_weights_trackable(self.model)}

    def create_model(self) -> keras.Model:
        return GptModel(self.config, classifier=False, name="gpt")

    def create_optimizer(self) -> keras.optimizers.Optimizer:
        o = self.options  # the loop clips the all-reduced gradients (once) to o.max_grad_norm
        return o.loop_clipped_optimizer(o.learning_rate, t_total=o.num_train_steps,
                                        warmup=o.warmup_fraction)

    def scheduled_learning_rate(self) -> tf.Tensor:
        """lr · schedule(t / t_total) of the next update (without Adam's bias correction)."""
        return self.optimizer.learning_rate  # OpenAIAdam's is the scheduled one

    def replica_losses(self, outputs: dict, batch: dict,
                       ctx: tf.distribute.ReplicaContext) -> dict[str, tf.Tensor]:
        token_losses = lm_token_losses(outputs["lm_logits"], batch["token_ids"])  # [b, S-1]
        totals = micro_batch_totals(ctx)  # under gradient accumulation: the global batch's
        if totals is not None:
            return {"loss": tf.reduce_sum(token_losses) / totals["token_count"]}
        count = tf.cast(tf.size(token_losses), tf.float32)
        total = ctx.all_reduce(tf.distribute.ReduceOp.SUM, count)
        return {"loss": tf.reduce_sum(token_losses) / tf.stop_gradient(total)}

    def loss_totals(self, batch: dict, ctx: tf.distribute.ReplicaContext) -> dict[str, tf.Tensor]:
        """The global batch's number of predicted tokens (every window's S - 1)."""
        ids = batch["token_ids"]
        count = tf.cast(tf.size(ids[..., 1:]), tf.float32)
        return {"token_count": ctx.all_reduce(tf.distribute.ReduceOp.SUM, count)}

    def eval_loss_parts(self, outputs: dict, batch: dict) -> dict[str, tf.Tensor]:
        return lm_eval_sums(outputs["lm_logits"], batch["token_ids"])

    def eval_metrics(self, totals: dict[str, float], batch_sums: list[dict[str, float]]) -> dict:
        loss = totals["nll_sum"] / totals["token_count"]
        return {"loss": loss, "lm_loss": loss, "perplexity": math.exp(min(loss, 700.0)),
                "lm_accuracy": totals["correct_sum"] / totals["token_count"],
                "eval_tokens": int(totals["token_count"]), "eval_batches": len(batch_sums)}

    def initialize_from(self, init_checkpoint: str) -> None:
        kind = load_gpt_weights(self.model, init_checkpoint)
        logging.info("Initialised the GPT weights from %s (%s)", init_checkpoint, kind)

    def export_original_checkpoint(self) -> str:
        """Writes the weights as an original params folder `<output_dir>/original_params`
        (replacing an earlier one of this run) with the special-token rows and the config
        (`write_original_outputs`); returns the folder."""
        folder = os.path.join(self.options.output_dir, ORIGINAL_PARAMS_DIR)
        return write_original_outputs(self.model, folder, overwrite=True)


def lm_input_fn(files, n_ctx: int, global_batch: int, is_training: bool, seed: int):
    """`dataset_fn(ctx)` for the trainer: the `lm_data` windows as {"token_ids": int32
    [per_replica_batch, n_ctx]} (training: shuffled with `seed` and repeated; evaluation: in file
    order, once, the last partial batch kept)."""
    from bert_tf.pretraining_data.gpt_lm import FEATURE_NAME, lm_dataset

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        ds = lm_dataset(files, n_ctx, batch_size=ctx.get_per_replica_batch_size(global_batch),
                        is_training=is_training, seed=seed, input_context=ctx)
        return ds.map(lambda f: {"token_ids": f[FEATURE_NAME]})

    return dataset_fn


@dataclasses.dataclass(kw_only=True)
class GptPretrainingRun(DistributionOptions, GptTrainerOptions):
    """Every option of a GPT-1 LM pretraining run (tools/run_gpt_pretraining.py's flags, named
    as run_pretraining.py's where the meaning is the same, plus train.py's optimizer flags).

    Attributes:
      gpt_config_file: GptConfig JSON (train.py's names: n_vocab, n_special, n_ctx, n_embd,
        n_head, n_layer, embd_pdrop, attn_pdrop, resid_pdrop, clf_pdrop, afn).
      input_file: Input TF example files (can be a glob or comma separated): the n_ctx windows
        written by create_gpt_lm_data.py.
      eval_input_file: Held-out windows for --do_eval (<prefix>_heldout-*.tfrecord); default:
        --input_file.
      output_dir: The output directory where the model checkpoints will be written (a run with
        the same --output_dir resumes exactly).
      init_checkpoint: Initial weights: an original GPT-1 params folder (params_shapes.json +
        params_0..9.npy) or one of our training checkpoints (ckpt-N or its folder).
      do_train: Whether to run training.
      do_eval: Whether to evaluate the held-out LM loss and perplexity (eval_results.txt).
      train_batch_size: Total batch size for training (windows per step).
      eval_batch_size: Total batch size for eval.
      learning_rate: The peak learning rate (train.py's --lr).
      num_train_steps: Number of training steps (train.py's n_updates_total).
      num_warmup_steps: Number of warmup steps (used unless --lr_warmup is given).
      lr_warmup: train.py's --lr_warmup: warm-up as a fraction of --num_train_steps.
      lr_schedule: train.py's --lr_schedule (the paper pretrains with cosine annealing).
      l2: train.py's --l2: L2 weight inside the Adam step (matrices only unless --vector_l2).
      vector_l2: train.py's --vector_l2: the L2 term also on biases and gains.
      max_grad_norm: train.py's --max_grad_norm: global-norm clip (<= 0: none).
      b1: Adam beta1 (train.py's --b1).
      b2: Adam beta2 (train.py's --b2).
      e: Adam epsilon (train.py's --e).
      save_checkpoints_steps: How often to save the model checkpoint.
      iterations_per_loop: How many steps to make in each host loop (and per progress line).
      max_eval_steps: Maximum number of eval steps.
      keep_checkpoint_max: How many recent training checkpoints to keep.
      jit_compile: XLA-compile the train step.
      export_dir: Also export the trained LM as a SavedModel here (token_ids -> hidden_states,
        lm_logits, next_token_logits).
      seed: Seed for initialisation, dropout and input shuffling.
    """

    gpt_config_file: str
    input_file: str
    eval_input_file: str | None = None
    do_train: bool = False
    do_eval: bool = False
    export_dir: str | None = None
    seed: int = 12345


@runs_under_precision_policy()
def run_gpt_pretraining(run: GptPretrainingRun) -> dict:
    """Trains and/or evaluates as the options say; returns {"train": records, "eval": metrics,
    "original_params": folder, "export_dir": path, "curves": png}.

    Writes under output_dir: `training_checkpoints/` (resumed from), `train/` (TensorBoard),
    `original_params/` (the original layout + `special_rows.npy` + `config.json`: load it with
    `GptCausalLM.from_pretrained(output_dir)`), `eval_results.txt`, `curves.png`.
    """
    from bert_tf.pretraining_data.tfrecord_reader import expand_input_files

    if not (run.do_train or run.do_eval):
        raise UserInputError("at least one of --do_train or --do_eval must be True")
    config = GptConfig.from_json_file(run.gpt_config_file)
    run.validate()
    train_files = expand_input_files(run.input_file)
    eval_files = expand_input_files(run.eval_input_file) if run.eval_input_file else train_files
    if run.strategy_name == "tpu":
        check_tpu_paths([*train_files, *eval_files], "--input_file")
        check_tpu_paths([run.output_dir], "--output_dir")
    strategy = create_strategy_from_options(run)  # before TF runs any op (multi-worker)
    keras.utils.set_random_seed(run.seed)
    check_global_batch(run.train_batch_size, strategy, "--train_batch_size")
    check_global_batch(run.eval_batch_size, strategy, "--eval_batch_size")
    tf.io.gfile.makedirs(run.output_dir)
    trainer = GptPretrainingTrainer(config, run, strategy)
    result: dict = {}
    if run.do_train:
        result["train"] = trainer.train(lm_input_fn(train_files, config.n_ctx,
                                                    run.train_batch_size, True, run.seed))
        if trainer.is_chief:
            result["original_params"] = trainer.export_original_checkpoint()
            logging.info("Wrote the original-layout params %s", result["original_params"])
            result["curves"] = plot_curves(run.output_dir)
            if run.export_dir:
                from bert_tf.export.gpt import export_gpt_lm_savedmodel
                result["export_dir"] = export_gpt_lm_savedmodel(trainer.model, run.export_dir,
                                                                overwrite=True)
                logging.info("Exported the LM SavedModel to %s", result["export_dir"])
    else:  # evaluation alone: the run's newest checkpoint, else --init_checkpoint's weights
        trainer.restore_or_initialize()
    if run.do_eval:
        result["eval"] = trainer.evaluate(lm_input_fn(eval_files, config.n_ctx,
                                                      run.eval_batch_size, False, run.seed),
                                          run.max_eval_steps)
        logging.info("Held-out LM loss %.4f, perplexity %.2f over %d tokens",
                     result["eval"]["lm_loss"], result["eval"]["perplexity"],
                     result["eval"]["eval_tokens"])
    return result


def plot_curves(output_dir: str) -> str | None:
    """Draws the TensorBoard scalars of `output_dir/train` into `output_dir/curves.png`."""
    from bert_tf.plotting import plot_training_curves
    png = os.path.join(output_dir, "curves.png")
    try:
        plot_training_curves(os.path.join(output_dir, "train"), png,
                             title=f"GPT LM pretraining: {output_dir}")
    except (ImportError, OSError, ValueError) as e:  # a by-product: never fail the run
        logging.warning("could not draw %s: %s", png, e)
        return None
    return png
