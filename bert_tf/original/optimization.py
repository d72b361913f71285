"""google-research/bert's `optimization` module API on `tf.compat.v1` (graph mode).

`create_optimizer` builds the original's training op: learning rate `init_lr` decayed linearly
(polynomial decay, power 1) to 0 at `num_train_steps`, with a linear warm-up over the first
`num_warmup_steps`; `AdamWeightDecayOptimizer` (weight decay 0.01, beta_1 0.9, beta_2 0.999,
epsilon 1e-6, no decay for names matching "LayerNorm", "layer_norm" or "bias"); gradients clipped
to global norm 1.0; the global step incremented.

`AdamWeightDecayOptimizer` is the original's Adam with decoupled weight decay: no bias
correction, the decay `weight_decay_rate * param` added to the Adam update before the learning
rate scales it, slots `<var>/adam_m` and `<var>/adam_v` created with `tf.compat.v1.get_variable`
in the current variable scope (so `tf.compat.v1.train.Saver` writes the original's names), and
`apply_gradients` does not touch `global_step` (as in the original; `create_optimizer` increments
it). Its defaults are the original's: `weight_decay_rate=0.0`, no exclusions.

One deliberate difference: the original's `create_optimizer` groups the update with the
global-step increment without ordering them, so the learning rate is sometimes computed from the
already-incremented step (a race, see ../shared/fixtures/original/README.md §5). Here the
increment runs after the update, so every step uses the learning rate of the step before the
increment: the schedule the original's comments describe and the original release's reference
trajectory (../shared/fixtures/original/optimizer) was recorded with.

Both names need graph mode (`tf.gradients`, `tf.compat.v1.get_variable`); called eagerly they
raise `RuntimeError`. For eager / Keras training use `bert_tf.training.AdamWeightDecay`.
"""
from __future__ import annotations

import re

import tensorflow as tf


def _require_graph(what):
    if tf.executing_eagerly():
        raise RuntimeError(
            f"bert_tf.original: {what} builds a tf.compat.v1 training graph and needs graph "
            "mode, as the original did; build it inside `with tf.Graph().as_default():` or "
            "after `tf.compat.v1.disable_v2_behavior()`, or use "
            "bert_tf.training.AdamWeightDecay for eager / Keras training")


def create_optimizer(loss, init_lr, num_train_steps, num_warmup_steps, use_tpu):
    """The original's training op for `loss` over every trainable variable (see the module
    docstring). `use_tpu` wraps the optimizer in `tf.compat.v1.tpu.CrossShardOptimizer`."""
    _require_graph("create_optimizer")
    global_step = tf.compat.v1.train.get_or_create_global_step()

    learning_rate = tf.constant(value=init_lr, shape=[], dtype=tf.float32)
    # Linear decay to 0 at num_train_steps.
    learning_rate = tf.compat.v1.train.polynomial_decay(
        learning_rate,
        global_step,
        num_train_steps,
        end_learning_rate=0.0,
        power=1.0,
        cycle=False)

    # Linear warm-up: while global_step < num_warmup_steps, lr = global_step / num_warmup_steps
    # * init_lr.
    if num_warmup_steps:
        global_steps_int = tf.cast(global_step, tf.int32)
        warmup_steps_int = tf.constant(num_warmup_steps, dtype=tf.int32)
        global_steps_float = tf.cast(global_steps_int, tf.float32)
        warmup_steps_float = tf.cast(warmup_steps_int, tf.float32)
        warmup_percent_done = global_steps_float / warmup_steps_float
        warmup_learning_rate = init_lr * warmup_percent_done
        is_warmup = tf.cast(global_steps_int < warmup_steps_int, tf.float32)
        learning_rate = (1.0 - is_warmup) * learning_rate + is_warmup * warmup_learning_rate

    optimizer = AdamWeightDecayOptimizer(
        learning_rate=learning_rate,
        weight_decay_rate=0.01,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-6,
        exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"])
    if use_tpu:
        optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)

    tvars = tf.compat.v1.trainable_variables()
    grads = tf.gradients(loss, tvars)
    grads, _ = tf.clip_by_global_norm(grads, clip_norm=1.0)

    train_op = optimizer.apply_gradients(zip(grads, tvars), global_step=global_step)

    # AdamWeightDecayOptimizer leaves the global step alone: increment it here, after the update
    # (which read the step for its learning rate).
    with tf.control_dependencies([train_op]):
        increment = global_step.assign(global_step + 1)
    return tf.group(train_op, increment)


class AdamWeightDecayOptimizer(tf.compat.v1.train.Optimizer):
    """Adam with decoupled ("correct" L2) weight decay, the original's optimizer.

    For each (grad, param): m <- beta_1 m + (1 - beta_1) g; v <- beta_2 v + (1 - beta_2) g^2;
    update = m / (sqrt(v) + epsilon) [+ weight_decay_rate * param unless excluded];
    param <- param - learning_rate * update. No bias correction.
    """

    def __init__(self,
                 learning_rate,
                 weight_decay_rate=0.0,
                 beta_1=0.9,
                 beta_2=0.999,
                 epsilon=1e-6,
                 exclude_from_weight_decay=None,
                 name="AdamWeightDecayOptimizer"):
        super().__init__(False, name)
        self.learning_rate = learning_rate
        self.weight_decay_rate = weight_decay_rate
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.exclude_from_weight_decay = exclude_from_weight_decay

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """One update of every (grad, var) pair whose grad and var are not None; returns the
        grouped assign op (named `name`). `global_step` is accepted and not incremented."""
        _require_graph("AdamWeightDecayOptimizer.apply_gradients")
        assignments = []
        for grad, param in grads_and_vars:
            if grad is None or param is None:
                continue
            if isinstance(grad, tf.IndexedSlices):  # e.g. an embedding table's gradient
                grad = tf.convert_to_tensor(grad)

            param_name = self._get_variable_name(param.name)
            m = tf.compat.v1.get_variable(
                name=param_name + "/adam_m",
                shape=param.shape.as_list(),
                dtype=tf.float32,
                trainable=False,
                initializer=tf.compat.v1.zeros_initializer())
            v = tf.compat.v1.get_variable(
                name=param_name + "/adam_v",
                shape=param.shape.as_list(),
                dtype=tf.float32,
                trainable=False,
                initializer=tf.compat.v1.zeros_initializer())

            next_m = tf.multiply(self.beta_1, m) + tf.multiply(1.0 - self.beta_1, grad)
            next_v = (tf.multiply(self.beta_2, v)
                      + tf.multiply(1.0 - self.beta_2, tf.square(grad)))
            update = next_m / (tf.sqrt(next_v) + self.epsilon)

            # Decoupled decay: added to the update (so it does not pass through m and v), the
            # same as L2 on the weights under plain SGD.
            if self._do_use_weight_decay(param_name):
                update += self.weight_decay_rate * param

            update_with_lr = self.learning_rate * update
            next_param = param - update_with_lr

            assignments.extend([param.assign(next_param), m.assign(next_m), v.assign(next_v)])
        return tf.group(*assignments, name=name)

    def _do_use_weight_decay(self, param_name):
        """False when `weight_decay_rate` is 0/None or a pattern of `exclude_from_weight_decay`
        matches (`re.search`) `param_name`."""
        if not self.weight_decay_rate:
            return False
        if self.exclude_from_weight_decay:
            for r in self.exclude_from_weight_decay:
                if re.search(r, param_name) is not None:
                    return False
        return True

    def _get_variable_name(self, param_name):
        """The variable name without its ":N" output suffix."""
        m = re.match("^(.*):\\d+$", param_name)
        if m is not None:
            param_name = m.group(1)
        return param_name
