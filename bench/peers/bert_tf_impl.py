"""Adapter: bert_tf (this repository) for the side-by-side harness in /work/shared/bench-peers.

Implements the harness's adapter interface (see its README.md):
  FRAMEWORK, VERSIONS, class Pretrainer(cfg), class Encoder(cfg), native_train_step_factory.

Encoder:    bert_tf.modeling.BertEncoder (Keras 3 layers whose call is plain TF ops).
Pretrainer: bert_tf.modeling.BertPretrainer = encoder + MaskedLMHead (transform dense + gelu +
            LayerNorm, output weights tied to the word embeddings, own output bias) +
            NextSentenceHead (on the tanh pooler), as the original run_pretraining.py builds them;
            with `last_layer_at_predictions_only=True` as bert_tf's trainer defaults (the last
            block only at [CLS] + masked positions, the same logits;
            BERT_TF_BENCH_LAST_LAYER=full for every position), and the FFN GELU in training as
            XLA-compiled elementwise kernels (`xla_gelu_in_training=True`, the trainer's default;
            BERT_TF_BENCH_GELU=ops for TensorFlow's op-by-op GELU).
Keras:      Keras 3 (TensorFlow backend).

The harness owns graph mode: it wraps `Encoder.__call__` in tf.function(jit_compile=--jit) for
`--task infer`, and wraps `Pretrainer.logits` + loss + GradientTape + optimizer in one
tf.function(jit_compile=--jit) for `--task pretrain --loop custom`, identically for every
implementation. Nothing here adds its own tf.function, so the comparison is like for like.

Harness batch keys -> ours:
  token_ids -> input_word_ids, padding_mask -> input_mask, segment_ids -> input_type_ids,
  mask_positions -> masked_lm_positions.

Activation: `hidden_act="gelu"` is the original BERT's tanh approximation, the same function Model
Garden's BertEncoder uses by default (and the harness's Model Garden adapter sets explicitly).

Used by bench/bench_encoder.py as `--impl <abs path to this file>` (bench_bert.py's load_impl
accepts a path to a .py file).
"""
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import bert_tf  # noqa: E402
from bert_tf.modeling import BertConfig, BertEncoder, BertPretrainer  # noqa: E402
from bert_tf.training import FusedAdam  # noqa: E402

FRAMEWORK = "keras3"


def _versions():
    import importlib.metadata as md
    out = {"keras": keras.__version__}
    try:
        out["bert_tf"] = md.version("bert_tf")
    except md.PackageNotFoundError:
        out["bert_tf"] = getattr(bert_tf, "__version__", "?")
    return out


VERSIONS = _versions()


def _config(cfg):
    policy = cfg.get("dtype_policy")
    # Our layers take Keras' global dtype policy (fp32 unless the harness asks for mixed_bf16).
    keras.config.set_dtype_policy(policy or "float32")
    return BertConfig(
        vocab_size=cfg["vocab_size"],
        hidden_size=cfg["hidden_size"],
        num_hidden_layers=cfg["num_layers"],
        num_attention_heads=cfg["num_heads"],
        intermediate_size=cfg["intermediate_size"],
        max_position_embeddings=cfg["max_position"],
        type_vocab_size=cfg["type_vocab_size"],
        hidden_dropout_prob=cfg["dropout"],
        attention_probs_dropout_prob=cfg["dropout"],
        hidden_act="gelu",  # tanh approximation, as the original and Model Garden
    )


def _adam(lr):
    """bert_tf's Adam: Keras Adam's math in one TF kernel per variable
    (`bert_tf.training.FusedAdam`); BERT_TF_BENCH_OPTIMIZER=keras selects `keras.optimizers.Adam`
    (to measure the model alone)."""
    if os.environ.get("BERT_TF_BENCH_OPTIMIZER", "fused") == "keras":
        return keras.optimizers.Adam(learning_rate=lr)
    return FusedAdam(learning_rate=lr)


def _last_layer_at_predictions_only():
    """As bert_tf's trainer and tools/run_pretraining.py default: the last block only at [CLS] +
    the masked positions (same logits). BERT_TF_BENCH_LAST_LAYER=full computes every position."""
    return os.environ.get("BERT_TF_BENCH_LAST_LAYER", "pruned") != "full"


def _xla_gelu():
    """As bert_tf's trainer defaults: the FFN's GELU (training only) as XLA-compiled elementwise
    kernels. BERT_TF_BENCH_GELU=ops uses TensorFlow's op-by-op GELU."""
    return os.environ.get("BERT_TF_BENCH_GELU", "xla") != "ops"


def _encoder_inputs(batch):
    return {
        "input_word_ids": batch["token_ids"],
        "input_mask": batch["padding_mask"],
        "input_type_ids": batch["segment_ids"],
    }


class Pretrainer:
    """MLM + NSP pretraining model (BertPretrainer)."""

    has_nsp = True

    def __init__(self, cfg):
        self.model = BertPretrainer(
            _config(cfg), last_layer_at_predictions_only=_last_layer_at_predictions_only(),
            xla_gelu_in_training=_xla_gelu())

    @staticmethod
    def _inputs(batch):
        x = _encoder_inputs(batch)
        x["masked_lm_positions"] = batch["mask_positions"]
        return x

    def build(self, batch):
        self.model.build_from_config_shapes()
        self.model(self._inputs(batch), training=False)

    @property
    def trainable_variables(self):
        return self.model.trainable_variables

    def logits(self, batch, training):
        out = self.model(self._inputs(batch), training=training)
        return out["masked_lm_logits"], out["next_sentence_logits"]

    def make_optimizer(self, lr):
        return _adam(lr)


class Encoder:
    """Encoder only (sequence_output + pooled_output) for inference."""

    def __init__(self, cfg):
        self.model = BertEncoder(_config(cfg)).build_from_config_shapes()

    def __call__(self, batch, training=False):
        out = self.model(_encoder_inputs(batch), training=training)
        return out["sequence_output"], out["pooled_output"]

    def count_params(self):
        return self.model.count_params()


def native_train_step_factory(cfg, lr, jit):
    """bert_tf's own loop is a custom GradientTape step too; this is the same loss as the harness's
    custom loop computed with bert_tf.modeling.losses (masked_lm_loss + next_sentence_loss)."""
    from bert_tf.modeling import masked_lm_loss, next_sentence_loss

    model = BertPretrainer(_config(cfg), last_layer_at_predictions_only=(
        _last_layer_at_predictions_only()), xla_gelu_in_training=_xla_gelu()
    ).build_from_config_shapes()
    optimizer = _adam(lr)
    optimizer.build(model.trainable_variables)

    @tf.function(jit_compile=jit)
    def step(batch):
        x = Pretrainer._inputs(batch)
        with tf.GradientTape() as tape:
            out = model(x, training=True)
            mlm, _, _ = masked_lm_loss(out["masked_lm_logits"], batch["mask_labels"],
                                       batch["mask_weights"])
            nsp, _, _ = next_sentence_loss(out["next_sentence_logits"], batch["nsp_labels"])
            loss = mlm + nsp
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return step, model
