"""The pretraining loop: one code path for every tf.distribute strategy, exact resume, progress.

`PretrainingTrainer` owns the model, the optimizer and a `tf.train.CheckpointManager` whose
checkpoints hold the weights, the optimizer slots, the step and the dropout random streams
(`bert_tf.training.random_state`; per replica via the replica id). The input position is restored by
re-creating the (seeded, deterministic) input pipeline and skipping the batches already consumed
(tf.distribute's distributed iterators are not checkpointable in TF 2.21), so a restart with the
same `output_dir` continues exactly where the last checkpoint left off
(`PretrainingTrainer.restore_or_initialize`, which `train` calls first).
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
import time
from typing import Callable

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf.checkpoints import (latest_checkpoint, load_original_checkpoint, variable_map,
                                 write_step_checkpoint)
from bert_tf.errors import UserInputError
from bert_tf.io_utils import atomic_write_text
from bert_tf.modeling import BertConfig, BertPretrainer
from bert_tf.modeling.cross_entropy import sparse_softmax_cross_entropy
from bert_tf.modeling.recompute import enable_recompute
from bert_tf.training.accumulation import (MemoryOptions, MicroBatchContext, accumulate_gradients,
                                           check_accumulation, micro_batch_totals)
from bert_tf.training.distribution import check_global_batch, is_chief
from bert_tf.training.optimization import create_optimizer
from bert_tf.training.random_state import checkpoint_has_random_state, training_random_state

DatasetFn = Callable[[tf.distribute.InputContext], tf.data.Dataset]


@dataclasses.dataclass
class PretrainingLoopOptions(MemoryOptions):
    """Hyper-parameters of the pretraining loop, whatever the model family (the original
    run_pretraining.py flags, plus the keyword-only memory savers of `MemoryOptions`:
    `gradient_accumulation_steps`, `recompute_activations`). BERT's trainer takes
    `TrainerOptions`, which adds BERT's model and optimizer choices; GPT-1's takes
    `bert_tf.runs.gpt_pretraining.GptTrainerOptions`."""

    output_dir: str
    train_batch_size: int = 32
    eval_batch_size: int = 8
    learning_rate: float = 5e-5
    num_train_steps: int = 100000
    num_warmup_steps: int = 10000
    save_checkpoints_steps: int = 1000
    iterations_per_loop: int = 1000
    max_eval_steps: int = 100
    keep_checkpoint_max: int = 5
    jit_compile: bool = False
    init_checkpoint: str | None = None

    def __post_init__(self) -> None:
        """Checks the numbers before any work; errors name the flag (UserInputError)."""
        minimum = {"train_batch_size": 1, "eval_batch_size": 1, "num_train_steps": 0,
                   "num_warmup_steps": 0, "save_checkpoints_steps": 1, "iterations_per_loop": 1,
                   "max_eval_steps": 1, "keep_checkpoint_max": 1}
        for name, low in minimum.items():
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < low:
                raise UserInputError(f"--{name}={value!r}: expected an integer >= {low}")
        if not (isinstance(self.learning_rate, (int, float)) and
                math.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise UserInputError(f"--learning_rate={self.learning_rate!r}: expected a number > 0")
        self.check_memory_options(self.train_batch_size)


@dataclasses.dataclass
class TrainerOptions(PretrainingLoopOptions):
    """`PretrainingLoopOptions` plus BERT's model and optimizer choices (`PretrainingTrainer`)."""

    optimizer: str = "adamw"
    # Compute the last transformer block only at [CLS] and the masked positions (the rows the
    # losses read; same losses up to float rounding). False = every position, as the original.
    last_layer_at_predictions_only: bool = True
    # The FFN's GELU as two XLA-compiled elementwise kernels while training (same values up to
    # float rounding, +6% steps/s at L=4 on CPU). False = TensorFlow's op-by-op GELU.
    xla_gelu: bool = True


def _local_loss_parts(outputs: dict, batch: dict) -> dict[str, tf.Tensor]:
    """Per-replica sums from which the original's global-batch losses and metrics are formed."""
    logits = outputs["masked_lm_logits"]
    ids = tf.reshape(tf.cast(batch["masked_lm_ids"], tf.int32), [-1])
    weights = tf.reshape(tf.cast(batch["masked_lm_weights"], tf.float32), [-1])
    # -log_softmax(logits)[id] as XLA kernels (float32 math, ~2.5x faster than the op-by-op
    # log-softmax and gather on CPU over [batch * P, vocab]); same values up to float rounding.
    mlm_nll, predicted = sparse_softmax_cross_entropy(
        ids, tf.reshape(logits, [-1, tf.shape(logits)[-1]]), return_predictions=True)
    mlm_correct = tf.cast(tf.equal(predicted, ids), tf.float32)
    nsp_lp = tf.nn.log_softmax(tf.cast(outputs["next_sentence_logits"], tf.float32))
    labels = tf.reshape(tf.cast(batch["next_sentence_labels"], tf.int32), [-1])
    nsp_nll = -tf.gather(nsp_lp, labels, batch_dims=1)
    nsp_correct = tf.cast(tf.equal(tf.argmax(nsp_lp, -1, output_type=tf.int32), labels), tf.float32)
    return {
        "mlm_nll_sum": tf.reduce_sum(weights * mlm_nll),
        "mlm_weight_sum": tf.reduce_sum(weights),
        "mlm_correct_sum": tf.reduce_sum(weights * mlm_correct),
        "nsp_nll_sum": tf.reduce_sum(nsp_nll),
        "nsp_correct_sum": tf.reduce_sum(nsp_correct),
        "count": tf.cast(tf.size(labels), tf.float32),
    }


class PretrainingTrainer:
    """Trains `BertPretrainer` with the original objective and optimizer under a strategy.

    Use: `train(dataset_fn)` (resumes `output_dir`'s run, trains, checkpoints), `evaluate`,
    `export_original_checkpoint`; `restore_or_initialize()` restores (or initialises) the run
    without training, e.g. to evaluate its weights, and returns its step.

    Another model family reuses the loop by overriding the hooks `create_model`,
    `create_optimizer`, `replica_losses` (+ `loss_keys`), `eval_loss_parts` / `eval_metrics`,
    `initialize_from`, `scheduled_learning_rate`, `export_original_checkpoint` and
    `checkpoint_objects`, and `clip_norm` (e.g. `GptPretrainingTrainer` of
    `bert_tf.runs.gpt_pretraining`); `on_progress` follows the steps (e.g. a progress bar). The
    loop reads only the `PretrainingLoopOptions` fields of `options`; BERT's hooks also read
    `TrainerOptions`'.
    """

    # The per-step losses recorded, logged and written to TensorBoard (besides learning_rate and
    # grad_norm); `replica_losses` returns them.
    loss_keys: tuple[str, ...] = ("loss", "masked_lm_loss", "next_sentence_loss")
    # Global-norm clip of the summed gradients (None: no clipping).
    clip_norm: float | None = 1.0

    def __init__(self, config: BertConfig, options: PretrainingLoopOptions,
                 strategy: tf.distribute.Strategy | None = None):
        self.config = config
        self.options = options
        self.strategy = strategy or tf.distribute.get_strategy()
        self.per_replica_batch = check_global_batch(options.train_batch_size, self.strategy)
        self.accumulation_steps = check_accumulation(
            getattr(options, "gradient_accumulation_steps", 1), options.train_batch_size,
            self.strategy.num_replicas_in_sync)
        with self.strategy.scope():
            self.model = self.create_model()
            if getattr(options, "recompute_activations", False):
                enable_recompute(self.model)
            self.optimizer = self.create_optimizer()
            self.optimizer.aggregate_gradients = False  # the step all-reduces before clipping
            self.optimizer.build(self.model.trainable_variables)
            # Steps run, including steps skipped by loss scaling (which do not advance the
            # optimizer's iteration count, hence the schedule); the input position follows this.
            self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step",
                                           aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
            self.loss_scale_optimizer = None
            if keras.mixed_precision.global_policy().name == "mixed_float16":
                # Dynamic loss scaling: it unscales, skips non-finite steps and adapts the scale;
                # the wrapped optimizer then clips (global norm 1.0) and applies.
                self.optimizer.global_clipnorm = 1.0
                self.loss_scale_optimizer = keras.optimizers.LossScaleOptimizer(self.optimizer)
                self.loss_scale_optimizer.build(self.model.trainable_variables)
        self.history: list[dict] = []
        self._train_iterator = None
        self._checkpoint = None
        self._manager = None

    # ---- the hooks of a model family ---------------------------------------------------------
    def create_model(self) -> keras.Model:
        """The built model (called under the strategy's scope)."""
        return BertPretrainer(
            self.config, last_layer_at_predictions_only=self.options.last_layer_at_predictions_only,
            xla_gelu_in_training=self.options.xla_gelu).build_from_config_shapes()

    def create_optimizer(self) -> keras.optimizers.Optimizer:
        """The optimizer of `self.model` (called under the strategy's scope, before `build`)."""
        opts = self.options
        names = {v.path: n for n, v in variable_map(self.model).items()}
        return create_optimizer(opts.learning_rate, opts.num_train_steps, opts.num_warmup_steps,
                                opts.optimizer, variable_names=names)

    def replica_losses(self, outputs: dict, batch: dict,
                       ctx: tf.distribute.ReplicaContext) -> dict[str, tf.Tensor]:
        """This replica's shares of the global-batch losses (one per `loss_keys`; summed over the
        replicas they are the global batch's); "loss" is the one minimised.

        Under gradient accumulation `batch` is a micro-batch and `ctx` a `MicroBatchContext`
        whose `totals` (from `loss_totals`) are the whole global batch's normalisers: summed over
        the micro-batches too, the shares are the global batch's."""
        parts = _local_loss_parts(outputs, batch)
        totals = micro_batch_totals(ctx)
        if totals is None:
            weight_sum, count = ctx.all_reduce(tf.distribute.ReduceOp.SUM,
                                               [parts["mlm_weight_sum"], parts["count"]])
        else:
            weight_sum, count = totals["mlm_weight_sum"], totals["count"]
        mlm = parts["mlm_nll_sum"] / (tf.stop_gradient(weight_sum) + 1e-5)
        nsp = parts["nsp_nll_sum"] / tf.stop_gradient(count)
        return {"loss": mlm + nsp, "masked_lm_loss": mlm, "next_sentence_loss": nsp}

    def loss_totals(self, batch: dict, ctx: tf.distribute.ReplicaContext) -> dict[str, tf.Tensor]:
        """The global batch's loss normalisers, summed over the replicas, from this replica's
        whole batch (before its micro-batches; read by `replica_losses` from a
        `MicroBatchContext` under gradient accumulation). BERT: the masked-LM weight sum and the
        number of sequences, float32 scalars."""
        weights = tf.reduce_sum(tf.cast(batch["masked_lm_weights"], tf.float32))
        count = tf.cast(tf.size(batch["next_sentence_labels"]), tf.float32)
        weight_sum, count = ctx.all_reduce(tf.distribute.ReduceOp.SUM, [weights, count])
        return {"mlm_weight_sum": weight_sum, "count": count}

    def scheduled_learning_rate(self) -> tf.Tensor:
        """The learning rate of the next update (logged)."""
        return self.optimizer.learning_rate

    def eval_loss_parts(self, outputs: dict, batch: dict) -> dict[str, tf.Tensor]:
        """Per-replica sums of one evaluation batch (summed over replicas and batches)."""
        return _local_loss_parts(outputs, batch)

    def eval_metrics(self, totals: dict[str, float], batch_sums: list[dict[str, float]]) -> dict:
        """The evaluation results from the summed parts and each batch's sums."""
        loss_sum = sum(s["mlm_nll_sum"] / (s["mlm_weight_sum"] + 1e-5)
                       + s["nsp_nll_sum"] / s["count"] for s in batch_sums)
        return {
            "loss": loss_sum / len(batch_sums),
            "masked_lm_accuracy": totals["mlm_correct_sum"] / totals["mlm_weight_sum"],
            "masked_lm_loss": totals["mlm_nll_sum"] / totals["mlm_weight_sum"],
            "next_sentence_accuracy": totals["nsp_correct_sum"] / totals["count"],
            "next_sentence_loss": totals["nsp_nll_sum"] / totals["count"],
        }

    def initialize_from(self, init_checkpoint: str) -> None:
        """Loads `init_checkpoint` into a fresh model."""
        load_original_checkpoint(self.model, init_checkpoint)

    # ---- checkpoints ------------------------------------------------------------------------
    @property
    def is_chief(self) -> bool:
        """True except on non-chief workers of a multi-worker strategy (distribution.is_chief)."""
        return is_chief(self.strategy)

    @property
    def checkpoint_dir(self) -> str:
        """Training checkpoints; non-chief workers write theirs (needed by the collective save)
        to a private folder so they never clobber the chief's."""
        if self.is_chief:
            return os.path.join(self.options.output_dir, "training_checkpoints")
        resolver = self.strategy.cluster_resolver
        return os.path.join(self.options.output_dir, "workers",
                            f"{resolver.task_type}_{resolver.task_id}", "training_checkpoints")

    def _remove_leftovers(self) -> None:
        """Removes the temporary files earlier killed runs of this output left: TF's
        `ckpt-N_temp/` folders and `checkpoint.tmp<hex>` state files, the original-format
        export's `.ckpt_tmp_*` folders and `.<name>.<12 hex>.tmp` files (its `checkpoint` state
        file, eval_results.txt, curves.png) (one run per output_dir)."""
        _remove_matching(self.checkpoint_dir, _CHECKPOINT_TEMPORARIES)
        if self.is_chief:
            _remove_matching(self.options.output_dir, _OUTPUT_TEMPORARIES)

    def checkpoint_objects(self) -> dict[str, object]:
        """What a training checkpoint holds, by name (a hook: a family adds its own objects
        after these).

        `global_step`, the model, the optimizer (slots and iteration count), the dropout random
        streams (`training_random_state`) and, under mixed_float16, the loss-scale optimizer.
        The order matters: a variable reachable from two of them is saved under the first one's
        name.
        """
        objects = {"global_step": self.global_step, "model": self.model,
                   "optimizer": self.optimizer,
                   "random_state": training_random_state(self.model)}
        if self.loss_scale_optimizer is not None:
            objects["loss_scale_optimizer"] = self.loss_scale_optimizer
        return objects

    def _checkpoint_manager(self) -> tf.train.CheckpointManager:
        """The run's `CheckpointManager`, made on first use (after removing what killed runs of
        this output left behind)."""
        if self._manager is None:
            self._remove_leftovers()
            self._checkpoint = tf.train.Checkpoint()
            for name, trackable in self.checkpoint_objects().items():  # in order (see there)
                setattr(self._checkpoint, name, trackable)
            self._manager = tf.train.CheckpointManager(
                self._checkpoint, self.checkpoint_dir,
                max_to_keep=self.options.keep_checkpoint_max, step_counter=self.global_step,
                checkpoint_name="ckpt")
        return self._manager

    @property
    def latest_training_checkpoint(self) -> str | None:
        """The newest training checkpoint of this run (`<checkpoint_dir>/ckpt-<step>`: weights,
        optimizer slots, step, dropout streams), or None before the first save."""
        if self._manager is not None:
            return self._manager.latest_checkpoint
        return tf.train.latest_checkpoint(self.checkpoint_dir)

    def restore_or_initialize(self) -> int:
        """Resumes this run from its newest training checkpoint, or starts it; returns the step.

        With a training checkpoint in `output_dir` (an earlier, possibly killed, run of the same
        output): restores the weights, optimizer slots, global step and dropout random streams,
        so that `train` continues bit-identically to an uninterrupted run, and writes the
        original-format `model.ckpt-<step>` if the killed run had not. Otherwise: loads
        `options.init_checkpoint` if given (`initialize_from`), else keeps the fresh weights.
        Either way it first sets up the run's checkpoint manager (removing the temporary files of
        killed runs). `train` calls it itself; call it directly to evaluate or export a run's
        weights without training, or to know the step a `train` call will start from.

        Returns: the global step (the number of steps already run: 0 for a new run).
        Raises: AssertionError when the checkpoint does not match this model (TF's restore
          check).
        """
        manager = self._checkpoint_manager()
        latest = manager.latest_checkpoint
        if latest:
            if checkpoint_has_random_state(latest):
                self._checkpoint.restore(latest).assert_existing_objects_matched()
            else:  # written before the random state was checkpointed
                self._checkpoint.restore(latest).expect_partial()
                logging.warning("%s holds no dropout random state (an older checkpoint): the "
                                "run continues, but not bit-identically to an uninterrupted one",
                                latest)
            step = int(self.global_step.numpy())
            logging.info("Resumed from %s at step %d", latest, step)
            # A run killed between this training checkpoint and its model.ckpt-<step> (or its
            # listing in `checkpoint`): the restored weights are that step's, so write it now,
            # as the uninterrupted run has.
            original = latest_checkpoint(self.options.output_dir)
            if self.is_chief and (original is None
                                  or os.path.basename(original) != f"model.ckpt-{step}"):
                self.export_original_checkpoint()
        elif self.options.init_checkpoint:
            self.initialize_from(self.options.init_checkpoint)
            logging.info("Initialised weights from %s", self.options.init_checkpoint)
        return int(self.global_step.numpy())

    # ---- the step ---------------------------------------------------------------------------
    def _replica_step(self, batch):
        ctx = tf.distribute.get_replica_context()
        variables = self.model.trainable_variables
        lso = self.loss_scale_optimizer
        if self.accumulation_steps > 1:
            grads, losses = self._accumulated_gradients(batch, ctx, variables)
        else:
            with tf.GradientTape() as tape:
                outputs = self.model(batch, training=True)
                losses = self.replica_losses(outputs, batch, ctx)
                loss = losses["loss"]  # this replica's share; summed over replicas: the global loss
                scaled = lso.scale_loss(loss) if lso is not None else loss
            grads = tape.gradient(scaled, variables)
        grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        learning_rate = self.scheduled_learning_rate()
        if lso is not None:
            norm = tf.linalg.global_norm(grads) / tf.cast(lso.dynamic_scale, tf.float32)
            lso.apply_gradients(zip(grads, variables))
        elif self.clip_norm is None:
            norm = tf.linalg.global_norm(grads)
            self.optimizer.apply_gradients(zip(grads, variables))
        else:
            clipped, norm = tf.clip_by_global_norm(grads, self.clip_norm)
            self.optimizer.apply_gradients(zip(clipped, variables))
        summed = ctx.all_reduce(tf.distribute.ReduceOp.SUM, [losses[k] for k in self.loss_keys])
        return {**dict(zip(self.loss_keys, summed)),
                "learning_rate": tf.cast(learning_rate, tf.float32), "grad_norm": norm}

    def _accumulated_gradients(self, batch, ctx, variables):
        """(this replica's gradients of its share of the global-batch loss, its loss shares),
        computed in `accumulation_steps` micro-batches (`bert_tf.training.accumulation`)."""
        micro_ctx = MicroBatchContext(ctx, self.loss_totals(batch, ctx))
        lso = self.loss_scale_optimizer

        def micro_step(micro):
            losses = self.replica_losses(self.model(micro, training=True), micro, micro_ctx)
            loss = losses["loss"]
            return (lso.scale_loss(loss) if lso is not None else loss,
                    [losses[k] for k in self.loss_keys])

        grads, sums = accumulate_gradients(batch, self.accumulation_steps, variables, micro_step,
                                           len(self.loss_keys))
        missing = [v.path for v, g in zip(variables, grads) if g is None]
        if missing:  # the k = 1 step would fail in its all-reduce too
            raise ValueError(f"no gradient for {missing[:3]}: every trainable variable must "
                             "take part in the loss")
        return grads, dict(zip(self.loss_keys, sums))

    def train_step(self, batch: dict) -> dict:
        """One update on one global batch, outside the looped `train` (tests, notebooks).

        Args:
          batch: the pretraining features, each [global_batch, ...] (see `pretraining_dataset`).
        Returns: per-replica results of the step: "loss", "masked_lm_loss", "next_sentence_loss"
          (before the update), "learning_rate" and "grad_norm" (before clipping).
        """
        return self.strategy.run(self._replica_step, args=(batch,))

    def _make_train_loop(self):
        strategy = self.strategy
        step_fn = tf.function(self._replica_step, jit_compile=self.options.jit_compile) \
            if self.options.jit_compile else self._replica_step

        keys = (*self.loss_keys, "learning_rate", "grad_norm")

        @tf.function
        def train_loop(iterator, num_steps):
            history = tf.TensorArray(tf.float32, size=num_steps)
            for i in tf.range(num_steps):
                per_replica = strategy.run(step_fn, args=(next(iterator),))
                self.global_step.assign_add(1)
                values = [strategy.experimental_local_results(per_replica[k])[0] for k in keys]
                history = history.write(i, tf.stack(values))
            stacked = history.stack()  # [num_steps, len(keys)]
            return {k: stacked[:, j] for j, k in enumerate(keys)}

        return train_loop

    # ---- public API -------------------------------------------------------------------------
    def train(self, dataset_fn: DatasetFn, stop_after_step: int | None = None) -> list[dict]:
        """Trains until `num_train_steps` (or `stop_after_step`), resuming from `output_dir`.

        Args:
          dataset_fn: input_context -> tf.data.Dataset of per-replica batches (dicts of features),
            repeated and deterministic for its seed (needed for exact resume); e.g. the
            `bert_tf.pretraining_data.tfrecord_reader` pretraining input.
          stop_after_step: stop early at this global step (for tests and time-boxed jobs).

        Returns: per-step records {"step", "loss", "masked_lm_loss", "next_sentence_loss",
          "learning_rate", "grad_norm"} of the steps run in this call.
        """
        opts = self.options
        consumed = self.restore_or_initialize()
        # Each input pipeline feeds its worker's replicas one per-replica batch each per step.
        dist = self.strategy.distribute_datasets_from_function(
            lambda ctx: dataset_fn(ctx).skip(
                consumed * (ctx.num_replicas_in_sync // ctx.num_input_pipelines)))
        iterator = iter(dist)
        train_loop = self._make_train_loop()
        writer = (tf.summary.create_file_writer(os.path.join(opts.output_dir, "train"))
                  if self.is_chief else tf.summary.create_noop_writer())
        end = min(opts.num_train_steps, stop_after_step or opts.num_train_steps)
        step = int(self.global_step.numpy())
        start_step, t_start = step, time.perf_counter()
        records = []
        while step < end:
            next_save = (step // opts.save_checkpoints_steps + 1) * opts.save_checkpoints_steps
            n = min(opts.iterations_per_loop, next_save - step, end - step)
            t0 = time.perf_counter()
            try:
                out = {k: v.numpy() for k, v in train_loop(iterator, tf.constant(n)).items()}
            except tf.errors.DataLossError as e:  # a corrupt record past the checked ones
                raise UserInputError(
                    f"--input_file: a damaged TFRecord record in the training input after step "
                    f"{step} ({e.message.splitlines()[0]}); expected intact TFRecord files "
                    "(re-create or re-copy them). The last good checkpoint is "
                    f"{self.latest_training_checkpoint or '(none yet)'}") from None
            elapsed = time.perf_counter() - t0
            if not np.all(np.isfinite(out["loss"])):
                bad = step + int(np.argmin(np.isfinite(out["loss"]))) + 1
                raise FloatingPointError(
                    f"loss became NaN/Inf at step {bad}; stopped without saving. The last good "
                    f"checkpoint is {self.latest_training_checkpoint or '(none yet)'}")
            for i in range(n):
                records.append({"step": step + i + 1, **{k: float(v[i]) for k, v in out.items()}})
            step += n
            self._log_progress(records[-1], n, elapsed, step, end, start_step, t_start, writer)
            self.on_progress(records[-1], start_step, end)
            if step % opts.save_checkpoints_steps == 0 or step == end:
                path = self._manager.save(checkpoint_number=step)
                logging.info("Saved checkpoint %s", path)
                if self.is_chief:  # and, as the original, model.ckpt-<step> under its names
                    self.export_original_checkpoint()
        self.history.extend(records)
        return records

    def _log_progress(self, last, n, elapsed, step, end, start_step, t_start, writer) -> None:
        examples_per_s = n * self.options.train_batch_size / max(elapsed, 1e-9)
        done = step - start_step
        eta = (time.perf_counter() - t_start) / max(done, 1) * (end - step)
        losses = " ".join(f"{k} {last[k]:.4f}" for k in self.loss_keys)
        logging.info("step %d/%d %s lr %.3g %.1f examples/s ETA %s", step, end, losses,
                     last["learning_rate"], examples_per_s, _format_eta(eta))
        with writer.as_default(step=step):
            for k in (*self.loss_keys, "learning_rate", "grad_norm"):
                tf.summary.scalar(k, last[k])
            tf.summary.scalar("examples_per_second", examples_per_s)

    def on_progress(self, record: dict, start_step: int, end_step: int) -> None:
        """Called after each host loop of `train`, once its progress line is logged (a hook; does
        nothing here).

        Args:
          record: the loop's last per-step record (see `train`); `record["step"]` is the step.
          start_step: the step this `train` call started from (resumed runs: > 0).
          end_step: the step it stops at.
        """

    def evaluate(self, dataset_fn: DatasetFn, max_eval_steps: int | None = None) -> dict:
        """The original's eval metrics over at most `max_eval_steps` batches; writes
        `eval_results.txt` in `output_dir` ("key = value" lines, sorted)."""
        steps = max_eval_steps or self.options.max_eval_steps
        dist = self.strategy.distribute_datasets_from_function(dataset_fn)
        strategy = self.strategy

        @tf.function
        def eval_step(batch):
            def replica(b):
                return self.eval_loss_parts(self.model(b, training=False), b)
            per_replica = strategy.run(replica, args=(batch,))
            return {k: strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None)
                    for k, v in per_replica.items()}

        totals: dict[str, float] = {}
        batch_sums: list[dict[str, float]] = []
        for batch in dist:
            if len(batch_sums) >= steps:
                break
            sums = {k: float(v) for k, v in eval_step(batch).items()}
            for k, v in sums.items():
                totals[k] = totals.get(k, 0.0) + v
            batch_sums.append(sums)
        if not batch_sums:
            raise ValueError("the evaluation input gave no complete batch")
        result = {"global_step": int(self.global_step.numpy()),
                  **self.eval_metrics(totals, batch_sums)}
        atomic_write_text(os.path.join(self.options.output_dir, "eval_results.txt"),
                          "".join(f"{k} = {result[k]}\n" for k in sorted(result)))
        return result

    def export_original_checkpoint(self) -> str:
        """Writes `output_dir/model.ckpt-<step>` with the original TF1 names (+ global_step) and
        lists it in `output_dir/checkpoint`, keeping the newest `keep_checkpoint_max` (the
        original's layout: each one is usable as --init_checkpoint and by convert_checkpoint)."""
        step = int(self.global_step.numpy())
        return write_step_checkpoint({**variable_map(self.model), "global_step": np.int64(step)},
                                     self.options.output_dir, step,
                                     self.options.keep_checkpoint_max)


# Temporary names of this module's writers (TF's CheckpointManager, save_original_checkpoint,
# io_utils.atomic_output_path: `.<name>.<12 hex>.tmp` of the `checkpoint` state file,
# eval_results.txt, curves.png); never a final name.
_CHECKPOINT_TEMPORARIES = re.compile(r"ckpt-\d+_temp.*|checkpoint\.tmp[0-9a-f]*")
_OUTPUT_TEMPORARIES = re.compile(
    r"\.ckpt_tmp_.*|\.eval_results\.txt\..*\.tmp|\..+\.[0-9a-f]{12}[^/]*\.tmp")


def _remove_matching(directory: str, pattern: re.Pattern) -> list[str]:
    """Deletes the files and folders directly in `directory` whose names match `pattern`."""
    if not tf.io.gfile.isdir(directory):
        return []
    removed = []
    for name in tf.io.gfile.listdir(directory):
        name = name.rstrip("/")
        if pattern.fullmatch(name):
            path = os.path.join(directory, name)
            if tf.io.gfile.isdir(path):
                tf.io.gfile.rmtree(path)
            else:
                tf.io.gfile.remove(path)
            removed.append(path)
    if removed:
        logging.info("Removed %d temporary file(s) of an earlier interrupted run: %s",
                     len(removed), ", ".join(removed))
    return removed


def _format_eta(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(seconds)
    return f"{seconds // 3600:d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
