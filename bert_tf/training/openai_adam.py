"""The original GPT-1 optimizer (`opt.py`'s `adam`) as a Keras 3 optimizer, and its schedules.

`OpenAIAdam` reproduces `opt.adam(params, grads, lr, schedule, t_total, b1, b2, e, l2,
vector_l2, max_grad_norm)`:

- an own step counter `t` (here the optimizer's `iterations`, starting at 0; not a global step);
- all gradients clipped together by global norm when `max_grad_norm > 0`
  (g · max_grad_norm · min(1/‖g‖, 1/max_grad_norm));
- with `tt = t + 1`: `lrt = lr · sqrt(1 − b2^tt) / (1 − b1^tt) · schedule(t / t_total)` — the bias
  correction folded into the step size, the schedule read at the **pre-increment** `t`;
- `m ← b1·m + (1−b1)·g`, `v ← b2·v + (1−b2)·g²`;
- `p ← p − lrt · (m / (sqrt(v) + e) + l2·p)` when `p` has rank > 1 or `vector_l2` (and l2 > 0),
  else `p ← p − lrt · m / (sqrt(v) + e)`: ε on the uncorrected sqrt(v), and the L2 term INSIDE
  the step (scaled by the full lrt, bias correction and schedule included, using p before the
  update) — not decoupled weight decay.

Consequence of the schedules' shape: every warmup schedule gives lr 0 at the first update
(x = 0), so the first step moves m and v but not the weights.

The step-counter race. The original builds one `tf.group` of `t.assign(t + 1)` and every
variable's update, and nothing orders the increment before or after the per-variable reads of
`t` that compute `t / t_total`. With TF 1.x reference variables a read can see the incremented
value (observed once in 90 steps of the fixture's race study: schedule 0.8 instead of 0.6 at step
2), so the original's learning rate is not deterministic. This implementation is deterministic
and uses the semantics of the reference fixture: the schedule reads `t` BEFORE the increment,
the bias correction uses `t + 1`. (Keras increments `iterations` after all updates are applied.)
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable

import keras
import tensorflow as tf

from bert_tf.errors import UserInputError
from bert_tf.options import option


def warmup_cosine(x, warmup: float = 0.002) -> tf.Tensor:
    """`s·(x/warmup) + (1−s)·0.5·(1 + cos(πx))`, s = float32(x ≤ warmup). The cosine phase counts
    from x = 0 (not from the end of warmup) and rises again past x = 1. x float32 [...]."""
    x = tf.convert_to_tensor(x, tf.float32)
    s = tf.cast(x <= warmup, tf.float32)
    return s * (x / warmup) + (1 - s) * (0.5 * (1 + tf.cos(math.pi * x)))


def warmup_constant(x, warmup: float = 0.002) -> tf.Tensor:
    """`s·(x/warmup) + (1−s)`, s = float32(x ≤ warmup). x float32 [...]."""
    x = tf.convert_to_tensor(x, tf.float32)
    s = tf.cast(x <= warmup, tf.float32)
    return s * (x / warmup) + (1 - s) * 1


def warmup_linear(x, warmup: float = 0.002) -> tf.Tensor:
    """`(s·(x/warmup) + (1−s))·(1−x)`, s = float32(x ≤ warmup): the warmup ramp is also multiplied
    by (1 − x), and the factor turns negative past x = 1 (no clamp). x float32 [...]."""
    x = tf.convert_to_tensor(x, tf.float32)
    s = tf.cast(x <= warmup, tf.float32)
    return (s * (x / warmup) + (1 - s)) * (1 - x)


SCHEDULES: dict[str, Callable[..., tf.Tensor]] = {
    "warmup_cosine": warmup_cosine,
    "warmup_constant": warmup_constant,
    "warmup_linear": warmup_linear,
}


@keras.saving.register_keras_serializable(package="bert_tf")
class OpenAIAdam(keras.optimizers.Optimizer):
    """opt.py's `adam` (see the module docstring). Defaults are train.py's flags.

    Args:
      learning_rate: train.py's `--lr` (a float).
      t_total: number of updates of the whole run (train.py's `n_updates_total`; required,
        keyword-only); the schedule runs on x = t / t_total.
      schedule: `--lr_schedule`, a key of `SCHEDULES`.
      warmup: `--lr_warmup`, as a fraction of t_total.
      b1, b2, e: Adam's β1, β2, ε.
      l2: weight of the L2 term inside the step (`--l2`).
      vector_l2: also apply it to rank-1 variables (biases, LayerNorm g/b) (`--vector_l2`).
      max_grad_norm: global-norm clip (`--max_grad_norm`); ≤ 0 disables it.
      fused: compute each update as TF's one-pass `ResourceApplyAdam` kernel (m, v and the Adam
        step, with the original's `lrt` as its rate and no further bias correction) after the L2
        term `p ← p·(1 − lrt·l2)`: the same math in ~3 passes over a variable instead of ~10,
        equal to the op-by-op update up to float rounding (checked against the original's
        3-step fixture). False: the op-by-op update in the original's order.
    """

    def __init__(self, learning_rate: float = 6.25e-5, *, t_total: int,
                 schedule: str = "warmup_linear", warmup: float = 0.002, b1: float = 0.9,
                 b2: float = 0.999, e: float = 1e-8, l2: float = 0.01, vector_l2: bool = False,
                 max_grad_norm: float = 1.0, fused: bool = False, name: str = "openai_adam",
                 **kwargs):
        if schedule not in SCHEDULES:
            raise UserInputError(f"OpenAIAdam: schedule {schedule!r} is unknown; expected one of "
                                 f"{', '.join(SCHEDULES)}")
        if isinstance(learning_rate, bool) or not isinstance(learning_rate, (int, float)):
            raise UserInputError(f"OpenAIAdam: learning_rate must be a number, got "
                                 f"{learning_rate!r}")
        if isinstance(t_total, bool) or not isinstance(t_total, (int, float)) or t_total <= 0:
            raise UserInputError(f"OpenAIAdam: t_total must be a positive number of updates, "
                                 f"got {t_total!r}")
        for key in ("weight_decay", "clipnorm", "clipvalue", "global_clipnorm",
                    "gradient_accumulation_steps"):
            if kwargs.get(key) is not None:
                # Accumulation belongs to the loops (--gradient_accumulation_steps), which clip
                # the accumulated gradient once (bert_tf.training.accumulation).
                hint = ("the training loops' --gradient_accumulation_steps"
                        if key == "gradient_accumulation_steps" else "l2 / max_grad_norm")
                raise UserInputError(f"OpenAIAdam: {key} is not part of the original optimizer "
                                     f"(use {hint})")
            kwargs.pop(key, None)
        super().__init__(learning_rate=float(learning_rate), name=name,
                         global_clipnorm=float(max_grad_norm) if max_grad_norm > 0 else None,
                         **kwargs)
        self.t_total, self.schedule, self.warmup = t_total, schedule, float(warmup)
        self.b1, self.b2, self.e, self.l2 = float(b1), float(b2), float(e), float(l2)
        self.vector_l2, self.max_grad_norm = bool(vector_l2), float(max_grad_norm)
        self.fused = bool(fused)

    def build(self, var_list) -> None:
        if self.built:
            return
        super().build(var_list)
        self._m, self._v = self.add_optimizer_variables(var_list, ["m", "v"])

    def slots(self, variable) -> tuple[keras.Variable, keras.Variable]:
        """(m, v) of `variable`."""
        index = self._get_variable_index(variable)
        return self._m[index], self._v[index]

    @property
    def base_learning_rate(self):
        """The peak learning rate `lr` (train.py's `--lr`), before the schedule (a variable)."""
        return self._learning_rate

    @property
    def learning_rate(self) -> tf.Tensor:
        """float32 []: the learning rate of the next update, lr·schedule(t/t_total) at the current
        `iterations` = t (Adam's bias correction, which `step_size` folds in, is not included).

        Keras' convention for an optimizer with a schedule: what the training loops log and
        show (the peak rate is `base_learning_rate`; setting `learning_rate` sets the peak)."""
        t = tf.cast(self.iterations, tf.float32)
        return tf.cast(self._learning_rate, tf.float32) * SCHEDULES[self.schedule](
            t / tf.constant(self.t_total, tf.float32), warmup=self.warmup)

    @learning_rate.setter
    def learning_rate(self, value) -> None:
        keras.optimizers.Optimizer.learning_rate.fset(self, value)

    def step_size(self, learning_rate=None) -> tf.Tensor:
        """float32 []: the `lrt` of the next update (at the current `iterations` = t), as the
        original computes it: lr·sqrt(1 − b2^tt)/(1 − b1^tt)·schedule(t/t_total), tt = t + 1.
        `learning_rate`: the peak lr (default `base_learning_rate`)."""
        lr = self._learning_rate if learning_rate is None else learning_rate
        t = tf.cast(self.iterations, tf.float32)
        tt = t + 1
        lrt = tf.cast(lr, tf.float32) * tf.sqrt(1 - tf.pow(tf.constant(self.b2, tf.float32), tt))
        lrt = lrt / (1 - tf.pow(tf.constant(self.b1, tf.float32), tt))
        return lrt * SCHEDULES[self.schedule](t / tf.constant(self.t_total, tf.float32),
                                              warmup=self.warmup)

    def update_step(self, gradient, variable, learning_rate) -> None:
        # `learning_rate` is Keras' `self.learning_rate`, already scheduled: the step size is
        # computed from the peak rate in the original's order instead.
        del learning_rate
        g = tf.cast(tf.convert_to_tensor(gradient), variable.dtype)
        m, v = self.slots(variable)
        lrt = tf.cast(self.step_size(), variable.dtype)
        with_l2 = (len(variable.shape) > 1 or self.vector_l2) and self.l2 > 0
        if self.fused:
            from bert_tf.training.optimization import fused_adam_update
            if with_l2:  # p·(1 − lrt·l2), then the Adam step: p − lrt·(m/(√v + e) + l2·p)
                self.assign(variable, tf.convert_to_tensor(variable) * (1 - lrt * self.l2))
            fused_adam_update(variable, m, v, g, lrt, self.b1, self.b2, self.e)
            return
        mt = self.b1 * m + (1 - self.b1) * g
        vt = self.b2 * v + (1 - self.b2) * g * g
        p = tf.convert_to_tensor(variable)
        step = mt / (tf.sqrt(vt) + self.e)
        if with_l2:
            step = step + self.l2 * p
        self.assign(m, mt)
        self.assign(v, vt)
        self.assign(variable, p - lrt * step)

    def get_config(self) -> dict:
        return {"name": self.name, "learning_rate": float(self._learning_rate.numpy())
                if hasattr(self._learning_rate, "numpy") else self._learning_rate,
                "t_total": self.t_total, "schedule": self.schedule, "warmup": self.warmup,
                "b1": self.b1, "b2": self.b2, "e": self.e, "l2": self.l2,
                "vector_l2": self.vector_l2, "max_grad_norm": self.max_grad_norm,
                "fused": self.fused}


def lr_schedule_option(default: str = "warmup_linear"):
    """The `--lr_schedule` field (an enum flag of the `SCHEDULES` keys) with `default`; a run whose
    default differs from train.py's redeclares the field with this."""
    return option(default, choices=tuple(SCHEDULES))


@dataclasses.dataclass(kw_only=True)
class OpenAIAdamOptions:
    """train.py's optimizer flags, declared once for the GPT-1 runs (tools/run_gpt_pretraining.py,
    tools/run_gpt_classifier.py); the defaults are train.py's. A run's own options class may
    redeclare `lr_schedule` with another default (`lr_schedule_option(...)`) and word a field's
    help for its tool in its own "Attributes:" docstring (the nearest class's text is the flag's).
    The learning rate and the warm-up are the run's (their defaults and units differ).

    Attributes:
      lr_schedule: train.py's --lr_schedule: warmup_linear, warmup_cosine or warmup_constant.
      l2: train.py's --l2: L2 weight inside the Adam step (matrices only unless --vector_l2).
      vector_l2: train.py's --vector_l2: the L2 term also on biases and gains.
      max_grad_norm: train.py's --max_grad_norm: global-norm clip of the gradients.
      b1: Adam beta1 (train.py's --b1).
      b2: Adam beta2 (train.py's --b2).
      e: Adam epsilon (train.py's --e).
    """

    lr_schedule: str = lr_schedule_option()
    l2: float = 0.01
    vector_l2: bool = False
    max_grad_norm: float = 1.0
    b1: float = 0.9
    b2: float = 0.999
    e: float = 1e-8

    def check_lr_schedule(self) -> None:
        """UserInputError naming --lr_schedule when it is not a key of `SCHEDULES`."""
        if self.lr_schedule not in SCHEDULES:
            raise UserInputError(f"--lr_schedule={self.lr_schedule}: expected one of "
                                 f"{', '.join(SCHEDULES)}")

    def loop_clipped_optimizer(self, learning_rate: float, *, t_total: int,
                               warmup: float) -> OpenAIAdam:
        """`OpenAIAdam` with these options for a training loop that clips the (all-reduced,
        accumulated) gradients to `max_grad_norm` itself: the optimizer's own clip is off, so
        they are clipped once; `fused=True` (one ResourceApplyAdam kernel per variable).

        Args:
          learning_rate: the peak rate (train.py's --lr).
          t_total: number of updates of the whole run.
          warmup: the warm-up as a fraction of t_total.
        """
        return OpenAIAdam(learning_rate, t_total=t_total, schedule=self.lr_schedule,
                          warmup=warmup, b1=self.b1, b2=self.b2, e=self.e, l2=self.l2,
                          vector_l2=self.vector_l2, max_grad_norm=0.0, fused=True)
