"""LM train-step adapter: keras-hub's GPT2Backbone + GPT2CausalLM (Keras 3, TensorFlow backend).

Runs in the keras-hub peer venv (`$VENVS/kh`, made as ../shared/bench-peers/README.md says);
loaded by path by bench/bench_gpt_lm.py's `--worker` mode. Same LM adapter interface as
`gpt_bert_tf_lm.py` (FRAMEWORK, VERSIONS, class LmTrainStep(cfg, tokens, learning_rate, jit,
precision) with `n_params`, `description`, `__call__() -> loss`).

Precision ("float32" or "mixed_bfloat16"), as Keras and keras-hub document it: the global policy
`keras.mixed_precision.set_global_policy(precision)` before building, and the same policy as the
backbone's `dtype` (keras-hub's "dtype to use for the model's computations and weights";
GPT2CausalLM takes the backbone's policy): float32 variables, bfloat16 computations, softmax and
LayerNorm in float32; the compiled loss casts the logits to float32.

Model at the same size: GPT2Backbone(vocabulary_size = n_vocab + n_special, num_layers = n_layer,
num_heads = n_head, hidden_dim = n_embd, intermediate_dim = 4 n_embd, dropout, max_sequence_length
= n_ctx) under GPT2CausalLM (LM head tied to the token embedding). The parameter count equals
bert_tf's GPT-1 (its one table holds the n_ctx position rows that GPT-2 keeps in a separate
position embedding; GPT-2 adds a final LayerNorm: 2 n_embd more). GPT-2 is pre-LN, GPT-1 post-LN;
both GELU tanh, dropout on embeddings, attention probabilities and residual branches.

`BENCH_GPT2_LOOP`:
  native (default): keras-hub's own training path, the one its guides use:
    `GPT2CausalLM.compile(optimizer=keras.optimizers.Adam(lr), loss=SparseCategoricalCrossentropy(
    from_logits=True), weighted_metrics=[], jit_compile=jit)` then `train_on_batch(x, y,
    sample_weight)`: Keras' train_step (forward with dropout, loss, GradientTape, Adam).
  custom: one tf.function(jit_compile=jit) with a GradientTape around the model's logits, the
    mean token cross-entropy and `keras.optimizers.Adam.apply_gradients` (the shared harness's
    `--loop custom` shape).
Inputs as GPT2CausalLMPreprocessor makes them from a window of n_ctx + 1 tokens: x = tokens[:, :n_ctx]
(token_ids, padding_mask all ones), y = tokens[:, 1:] (n_ctx predictions per row).
"""
from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

FRAMEWORK = "keras3"
VERSIONS = {"keras": keras.__version__, "keras-hub": keras_hub.__version__}


class LmTrainStep:
    """One GPT2CausalLM training step on a fixed batch (see the module docstring)."""

    def __init__(self, cfg: dict, tokens: np.ndarray, learning_rate: float, jit: bool,
                 precision: str = "float32"):
        if precision not in ("float32", "mixed_bfloat16"):
            raise ValueError(f"precision={precision!r}: expected float32 or mixed_bfloat16")
        keras.mixed_precision.set_global_policy(precision)
        keras.utils.set_random_seed(12345)
        loop = os.environ.get("BENCH_GPT2_LOOP", "native")
        if loop not in ("native", "custom"):
            raise ValueError(f"BENCH_GPT2_LOOP={loop!r}: expected native or custom")
        n_ctx = cfg["n_ctx"]
        backbone = keras_hub.models.GPT2Backbone(
            vocabulary_size=cfg["n_vocab"] + cfg["n_special"], num_layers=cfg["n_layer"],
            num_heads=cfg["n_head"], hidden_dim=cfg["n_embd"], intermediate_dim=4 * cfg["n_embd"],
            dropout=cfg["dropout"], max_sequence_length=n_ctx, dtype=precision)
        self.model = keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)
        self.x = {"token_ids": tf.constant(tokens[:, :n_ctx], tf.int32),
                  "padding_mask": tf.ones((tokens.shape[0], n_ctx), tf.int32)}
        self.y = tf.constant(tokens[:, 1:n_ctx + 1], tf.int32)
        self.sample_weight = tf.ones((tokens.shape[0], n_ctx), tf.float32)
        optimizer = keras.optimizers.Adam(learning_rate=learning_rate)
        if loop == "native":
            self.description = ("keras-hub GPT2CausalLM.compile(Adam, SparseCategoricalCrossentropy"
                                "(from_logits=True)) + train_on_batch, 1 step per call")
            self.model.compile(optimizer=optimizer,
                               loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                               weighted_metrics=[], jit_compile=bool(jit))
            self._step = self._native_step
        else:
            self.description = ("keras-hub GPT2CausalLM logits + token cross-entropy + keras Adam "
                                "in one tf.function with a GradientTape, 1 step per call")
            self.model(self.x)  # build
            variables = self.model.trainable_variables
            optimizer.build(variables)
            model = self.model

            @tf.function(jit_compile=bool(jit))
            def step(x, y):
                with tf.GradientTape() as tape:
                    logits = model(x, training=True)
                    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                        labels=y, logits=tf.cast(logits, tf.float32)))
                grads = tape.gradient(loss, variables)
                optimizer.apply_gradients(zip(grads, variables))
                return loss

            self._custom = step
            self._step = lambda: float(self._custom(self.x, self.y).numpy())
        self.model(self.x)  # build before counting
        self.n_params = int(sum(int(np.prod(v.shape)) for v in self.model.trainable_variables))
        self.description = f"{self.description}, {precision}"

    def _native_step(self) -> float:
        loss = self.model.train_on_batch(self.x, self.y, sample_weight=self.sample_weight,
                                         return_dict=False)
        return float(loss[0] if isinstance(loss, (list, tuple)) else loss)

    def __call__(self) -> float:
        return self._step()

    def close(self) -> None:
        pass
