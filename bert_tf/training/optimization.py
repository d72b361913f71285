"""The original BERT optimizer and learning-rate schedule, as Keras 3 objects.

`AdamWeightDecay` is the original `AdamWeightDecayOptimizer`: Adam moments with **no bias
correction**, ε added outside the square root, and decoupled weight decay `lr * rate * param`
added to the update for every variable whose name does not match "LayerNorm", "layer_norm" or
"bias". `WarmupPolynomialDecay` is linear warm-up from 0, then linear decay to 0 at
`num_train_steps`, both evaluated at the step count *before* the update (as the original's
comments describe and as XLA/TPU execution does).
"""
from __future__ import annotations

import re
from typing import Iterable, Mapping

import keras
import tensorflow as tf

DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")

LORA_ADAPTER_WEIGHTS = r"lora_(kernel_)?[ab]$"
"""Matches LoRA's adapter matrices by name: a run's checkpoint names (`.../query/lora_a`,
`/lora_b`) and their Keras paths (`.../query/lora_kernel_a`, `_b`). The default exclusions do
not hold it, so the adapters are decayed as every other matrix (rate 0.01 in BERT's recipe),
as LoRA's own GLUE scripts do (microsoft/LoRA examples/NLU: HF Trainer, `--weight_decay 0.1`,
which exempts only biases and LayerNorm weights) and as HF peft + Trainer do whenever weight
decay is on. To exempt them: `exclude_from_weight_decay=DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY +
(LORA_ADAPTER_WEIGHTS,)` (`AdamWeightDecay`, `create_optimizer`); docs/training.md, LoRA."""


def _resource_handle(variable):
    """The resource handle of a Keras 3 variable or of a tf.Variable (a replica's component)."""
    value = getattr(variable, "value", None)
    if isinstance(value, tf.Variable):
        return value.handle
    return variable.handle


def fused_adam_update(variable, m, v, gradient, learning_rate, beta_1: float, beta_2: float,
                      epsilon: float, beta_1_power=0.0, beta_2_power=0.0) -> None:
    """One Adam update of `variable`, `m`, `v` in a single pass (TF's `ResourceApplyAdam` kernel).

    m ← m + (g − m)(1 − β1); v ← v + (g² − v)(1 − β2);
    variable ← variable − lr·√(1 − β2_power)/(1 − β1_power) · m / (√v + ε).
    With `beta_*_power` = 0 there is no bias correction (the original BERT optimizer); with
    β^t it is Keras' `Adam` exactly. A dense kernel: IndexedSlices gradients are densified first,
    which gives the dense Adam update (every row's moments decay), as the original does.
    """
    dtype = variable.dtype
    gradient = tf.cast(tf.convert_to_tensor(gradient), dtype)
    tf.raw_ops.ResourceApplyAdam(
        var=_resource_handle(variable), m=_resource_handle(m), v=_resource_handle(v),
        beta1_power=tf.cast(beta_1_power, dtype), beta2_power=tf.cast(beta_2_power, dtype),
        lr=tf.cast(learning_rate, dtype), beta1=tf.cast(beta_1, dtype),
        beta2=tf.cast(beta_2, dtype), epsilon=tf.cast(epsilon, dtype), grad=gradient,
        use_locking=False, use_nesterov=False)


class WarmupPolynomialDecay(keras.optimizers.schedules.LearningRateSchedule):
    """lr(step) = init_lr·step/warmup while step < warmup, else init_lr·(1 − min(step, T)/T)^power.

    The decay counts from step 0 (not from the end of warm-up), as the original: with lr 1e-4,
    warm-up 2 and T = 10 the rates of steps 0..4 are 0, 5e-5, 8e-5, 7e-5, 6e-5.
    """

    def __init__(self, init_lr: float, num_train_steps: int, num_warmup_steps: int = 0,
                 end_lr: float = 0.0, power: float = 1.0):
        super().__init__()
        if num_train_steps <= 0:
            raise ValueError(f"num_train_steps must be positive, got {num_train_steps}")
        if num_warmup_steps < 0:
            raise ValueError(f"num_warmup_steps must be >= 0, got {num_warmup_steps}")
        self.init_lr = init_lr
        self.num_train_steps = num_train_steps
        self.num_warmup_steps = num_warmup_steps
        self.end_lr = end_lr
        self.power = power

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        frac = tf.minimum(step, float(self.num_train_steps)) / float(self.num_train_steps)
        decayed = (self.init_lr - self.end_lr) * tf.pow(1.0 - frac, self.power) + self.end_lr
        if self.num_warmup_steps == 0:
            return decayed
        warmup = self.init_lr * step / float(self.num_warmup_steps)
        return tf.where(step < float(self.num_warmup_steps), warmup, decayed)

    def get_config(self) -> dict:
        return {"init_lr": self.init_lr, "num_train_steps": self.num_train_steps,
                "num_warmup_steps": self.num_warmup_steps, "end_lr": self.end_lr,
                "power": self.power}


class AdamWeightDecay(keras.optimizers.Optimizer):
    """The original `AdamWeightDecayOptimizer` (no bias correction, decoupled weight decay).

    Defaults: BERT's recipe, not the original class's. The original's `AdamWeightDecayOptimizer`
    defaults to `weight_decay_rate=0.0` and no exclusions, and every BERT script sets 0.01 and
    the LayerNorm/bias exclusions through `create_optimizer`; here those are the defaults, so
    that `AdamWeightDecay(learning_rate=...)` trains BERT as the scripts do. The original's
    defaults: `AdamWeightDecay(lr, weight_decay_rate=0.0, exclude_from_weight_decay=())`, or
    `bert_tf.original.optimization.AdamWeightDecayOptimizer` (the original's name, its defaults;
    docs/switching.md). Updates Keras variables and plain `tf.Variable`s.

    Args:
      learning_rate: float or schedule (called with the pre-update iteration count).
      weight_decay_rate: decay coefficient (0.01 in BERT; the original class's default is 0.0).
      beta_1, beta_2, epsilon: Adam constants (0.9, 0.999, 1e-6 in BERT).
      exclude_from_weight_decay: regexes searched in a variable's name; matches are not decayed
        (BERT's "LayerNorm", "layer_norm", "bias"; the original class's default: none).
      variable_names: optional {id(variable) or variable.path: name} used for the decay decision
        and slot names (e.g. the original TF1 names from `checkpoints.variable_map`); defaults to
        each variable's Keras path.
      fused: update each variable with TF's one-pass `ResourceApplyAdam` kernel (β powers 0, so
        no bias correction) after the decay `variable −= lr·rate·variable` — the same update,
        rounded differently (≤ 1e-7 on the fixture's five steps), and about 3× less memory
        traffic than the op-by-op form. `fused=False` runs the original's exact op order.
    """

    def __init__(self, learning_rate=1e-4, weight_decay_rate: float = 0.01, beta_1: float = 0.9,
                 beta_2: float = 0.999, epsilon: float = 1e-6,
                 exclude_from_weight_decay: Iterable[str] = DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY,
                 variable_names: Mapping | None = None, fused: bool = True,
                 name: str = "AdamWeightDecay", **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        # False when the caller all-reduces gradients itself (the trainer does, so that clipping
        # sees the global gradient as in the original); then they are not summed a second time.
        self.aggregate_gradients = True
        self.weight_decay_rate = weight_decay_rate
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.exclude_from_weight_decay = tuple(exclude_from_weight_decay)
        self._names = dict(variable_names or {})
        self.fused = fused

    def variable_name(self, variable) -> str:
        """The name used for the decay rule: the name given in `variable_names` (by id or
        path), else the Keras variable's path, or a plain `tf.Variable`'s name without its ":0"
        (`tf.Variable`s have no `.path`; Keras' own optimizers accept them too)."""
        path = getattr(variable, "path", None)
        if path is None:
            path = re.sub(r":\d+$", "", variable.name)
        for key in (id(variable), path):
            if key in self._names:
                return self._names[key]
        return path

    def uses_weight_decay(self, variable) -> bool:
        if not self.weight_decay_rate:
            return False
        name = self.variable_name(variable)
        return not any(re.search(p, name) for p in self.exclude_from_weight_decay)

    def build(self, var_list) -> None:
        if self.built:
            return
        super().build(var_list)
        self._m, self._v = [], []
        for var in var_list:
            self._m.append(self.add_variable_from_reference(var, "adam_m"))
            self._v.append(self.add_variable_from_reference(var, "adam_v"))
        self._decay = [self.uses_weight_decay(v) for v in var_list]

    def moments(self, variable) -> tuple:
        """(adam_m, adam_v) slot variables of a model variable."""
        i = self._get_variable_index(variable)
        return self._m[i], self._v[i]

    def update_step(self, gradient, variable, learning_rate) -> None:
        lr = tf.cast(learning_rate, variable.dtype)
        grad = tf.cast(tf.convert_to_tensor(gradient), variable.dtype)
        i = self._get_variable_index(variable)
        m, v = self._m[i], self._v[i]
        if self.fused:
            if self._decay[i]:
                # decay from the pre-update value, as the original's `update += rate * param`
                variable.assign_sub(lr * self.weight_decay_rate * variable)
            fused_adam_update(variable, m, v, grad, lr, self.beta_1, self.beta_2, self.epsilon)
            return
        next_m = self.beta_1 * m + (1.0 - self.beta_1) * grad
        next_v = self.beta_2 * v + (1.0 - self.beta_2) * tf.square(grad)
        update = next_m / (tf.sqrt(next_v) + self.epsilon)
        if self._decay[i]:
            update += self.weight_decay_rate * variable
        variable.assign(variable - lr * update)
        m.assign(next_m)
        v.assign(next_v)

    def _all_reduce_sum_gradients(self, grads_and_vars):
        # Keras' TF optimizer sums replica gradients here; skipped when already aggregated.
        if self.aggregate_gradients:
            return super()._all_reduce_sum_gradients(grads_and_vars)
        return list(grads_and_vars)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(weight_decay_rate=self.weight_decay_rate, beta_1=self.beta_1,
                      beta_2=self.beta_2, epsilon=self.epsilon,
                      exclude_from_weight_decay=list(self.exclude_from_weight_decay),
                      fused=self.fused)
        return config


class FusedAdam(keras.optimizers.Adam):
    """Keras `Adam` (bias-corrected) whose update runs as one `ResourceApplyAdam` kernel per
    variable on the TensorFlow backend: the same math as `keras.optimizers.Adam`, in one pass over
    the variable and its moments instead of about ten (`amsgrad` is not supported)."""

    def __init__(self, *args, **kwargs):
        if kwargs.get("amsgrad"):
            raise ValueError("FusedAdam does not support amsgrad; use keras.optimizers.Adam")
        super().__init__(*args, **kwargs)

    def update_step(self, gradient, variable, learning_rate) -> None:
        i = self._get_variable_index(variable)
        local_step = tf.cast(self.iterations + 1, variable.dtype)
        fused_adam_update(variable, self._momentums[i], self._velocities[i], gradient,
                          learning_rate, self.beta_1, self.beta_2, self.epsilon,
                          beta_1_power=tf.pow(tf.cast(self.beta_1, variable.dtype), local_step),
                          beta_2_power=tf.pow(tf.cast(self.beta_2, variable.dtype), local_step))


class Lamb(keras.optimizers.Lamb):
    """Keras LAMB that, like `AdamWeightDecay`, can take gradients already summed over replicas."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.aggregate_gradients = True

    def _all_reduce_sum_gradients(self, grads_and_vars):
        if self.aggregate_gradients:
            return super()._all_reduce_sum_gradients(grads_and_vars)
        return list(grads_and_vars)


def create_optimizer(init_lr: float, num_train_steps: int, num_warmup_steps: int,
                     optimizer_type: str = "adamw", variable_names: Mapping | None = None,
                     weight_decay_rate: float = 0.01,
                     exclude_from_weight_decay: Iterable[str] = DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY
                     ) -> keras.optimizers.Optimizer:
    """The original `create_optimizer` (without the clipping, which the train step does).

    `optimizer_type`: "adamw" (the original's) or "lamb" (Keras LAMB with the same schedule and
    weight-decay exclusions, for large-batch pretraining). `exclude_from_weight_decay`: regexes
    of the names not decayed (BERT's LayerNorm and bias; add `LORA_ADAPTER_WEIGHTS` to exempt
    LoRA's adapters, which are decayed by default).
    """
    schedule = WarmupPolynomialDecay(init_lr, num_train_steps, num_warmup_steps)
    exclude = list(exclude_from_weight_decay)
    if optimizer_type == "adamw":
        return AdamWeightDecay(learning_rate=schedule, weight_decay_rate=weight_decay_rate,
                               variable_names=variable_names, exclude_from_weight_decay=exclude)
    if optimizer_type == "lamb":
        opt = Lamb(learning_rate=schedule, beta_1=0.9, beta_2=0.999,
                                    epsilon=1e-6, weight_decay=weight_decay_rate)
        opt.exclude_from_weight_decay(var_names=exclude)
        return opt
    raise ValueError(f"unknown optimizer {optimizer_type!r}; expected 'adamw' or 'lamb'")


def clip_by_global_norm(grads: list, clip_norm: float = 1.0) -> tuple[list, tf.Tensor]:
    """The original's `tf.clip_by_global_norm(grads, 1.0)`; returns (clipped grads, norm)."""
    return tf.clip_by_global_norm(grads, clip_norm)
