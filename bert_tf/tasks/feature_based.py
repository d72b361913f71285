"""The paper's feature-based use of BERT (section 5.3, Table 7): a frozen BERT whose chosen layers
feed a randomly initialised two-layer BiLSTM tagger and a linear classifier (CoNLL-2003 NER).

BERT's parameters are not fine-tuned: the encoder is built non-trainable and always run in
inference mode (no dropout), and its activations enter the tagger through `tf.stop_gradient`.
Only the combination weights (for the learned weighted sums), the BiLSTMs and the classifier are
trained. `FeatureBasedTagger` has the outputs of `BertTokenClassifier` (`logits` [batch, seq,
num_labels]), so the same NER features, loss and prediction code serve both
(`tools/run_ner.py --feature_based=True --feature_layers=concat_last_four`).

Layer choices (`FEATURE_LAYERS`), the rows of the paper's Table 7:
  embeddings              the embedding output (after LayerNorm)          [batch, seq, H]
  second_to_last          the output of block L-1                          [batch, seq, H]
  last                    the output of block L                            [batch, seq, H]
  sum_last_four           Σ of the last four blocks' outputs               [batch, seq, H]
  weighted_sum_last_four  γ·Σ softmax(w)_j h_j over the last four (learned) [batch, seq, H]
  concat_last_four        the last four concatenated                        [batch, seq, 4H]
  sum_all                 Σ of all L blocks' outputs                       [batch, seq, H]
  weighted_sum_all        γ·Σ softmax(w)_j h_j over all L blocks (learned)  [batch, seq, H]
  concat_embeddings_and_all  the embedding output and all L blocks' outputs concatenated
                          [batch, seq, (L+1)·H]; not a row of Table 7: what the studies
                          concatenate instead of the last four when the model has fewer than
                          four layers (every hidden state it has; BERT Table 8's feature-based
                          column at the tiny and small scales)
The fixed combinations are `bert_tf.tasks.feature_extraction.combine_layers`; the learned ones are
`ScalarMix` (ELMo's scalar mix: softmax-normalised layer weights and a scale γ).
"""
from __future__ import annotations

from typing import Mapping, Sequence

import keras
import tensorflow as tf

from bert_tf.tasks.feature_extraction import combine_layers
from bert_tf.modeling import BertConfig, BertEncoder
from bert_tf.modeling.dropout import BertDropout
from bert_tf.modeling.encoder import canonical_inputs
from bert_tf.modeling.serialization import DummyBatchBuilt, init_kwargs_from_saved, register

FEATURE_LAYERS = ("embeddings", "second_to_last", "last", "sum_last_four",
                  "weighted_sum_last_four", "concat_last_four", "sum_all", "weighted_sum_all",
                  "concat_embeddings_and_all")


def min_layers(mode: str) -> int:
    """How many transformer layers (blocks) a `FEATURE_LAYERS` choice needs (concat_last_four:
    4)."""
    return {"second_to_last": 2, "sum_last_four": 4, "weighted_sum_last_four": 4,
            "concat_last_four": 4}.get(mode, 1)


def _needs_layers(mode: str, num_layers: int) -> int:
    """How many of the last blocks a combination reads (ValueError if the encoder has fewer)."""
    needed = min_layers(mode)
    if num_layers < needed:
        raise ValueError(f"feature layers {mode!r} need at least {needed} transformer layers; "
                         f"the model has {num_layers}")
    return needed


def feature_size(mode: str, hidden_size: int, num_layers: int | None = None) -> int:
    """Width of the combined features: 4·H for concat_last_four, (L+1)·H for
    concat_embeddings_and_all (`num_layers` = L is then required), H otherwise."""
    if mode not in FEATURE_LAYERS:
        raise ValueError(f"unknown feature layers {mode!r}; expected one of "
                         f"{', '.join(FEATURE_LAYERS)}")
    if mode == "concat_embeddings_and_all":
        if num_layers is None:
            raise ValueError(f"feature layers {mode!r}: the width needs num_layers")
        return (num_layers + 1) * hidden_size
    return 4 * hidden_size if mode == "concat_last_four" else hidden_size


@register
class ScalarMix(keras.layers.Layer):
    """Learned weighted sum of layers: γ · Σ_j softmax(w)_j · h_j (ELMo's scalar mix).

    Call with a list of `num_layers` tensors of one shape [batch, seq, H]; returns [batch, seq, H].
    The weights `w` start at 0 (a plain average) and γ at 1.
    """

    def __init__(self, num_layers: int, **kwargs):
        kwargs.setdefault("name", "scalar_mix")
        super().__init__(**kwargs)
        if num_layers <= 0:
            raise ValueError(f"num_layers must be positive, got {num_layers}")
        self.num_layers = num_layers

    def get_config(self) -> dict:
        return {**super().get_config(), "num_layers": self.num_layers}

    def build(self, input_shape=None) -> None:
        self.layer_weights = self.add_weight(name="layer_weights", shape=(self.num_layers,),
                                             initializer="zeros")
        self.gamma = self.add_weight(name="gamma", shape=(), initializer="ones")
        self.built = True

    def call(self, layers: Sequence[tf.Tensor]) -> tf.Tensor:
        if len(layers) != self.num_layers:
            raise ValueError(f"ScalarMix of {self.num_layers} layers called with {len(layers)}")
        stacked = tf.stack([tf.cast(x, self.compute_dtype) for x in layers], axis=0)
        weights = tf.cast(tf.nn.softmax(self.layer_weights), stacked.dtype)
        return tf.cast(self.gamma, stacked.dtype) * tf.tensordot(weights, stacked, axes=1)


def select_features(encoder_outputs: Mapping[str, tf.Tensor], mode: str,
                    scalar_mix: ScalarMix | None = None) -> tf.Tensor:
    """The features of one `FEATURE_LAYERS` choice from a `BertEncoder`'s outputs.

    Args:
      encoder_outputs: the encoder's output dict (`embedding_output`, `encoder_outputs`).
      mode: one of `FEATURE_LAYERS`.
      scalar_mix: the learned mix for the `weighted_*` modes (over 4 or L layers).

    Returns:
      [batch, seq, H] ([batch, seq, 4H] for concat_last_four, [batch, seq, (L+1)H] for
      concat_embeddings_and_all).
    """
    layers = list(encoder_outputs["encoder_outputs"])
    feature_size(mode, 1, len(layers))  # validates the name
    _needs_layers(mode, len(layers))
    if mode == "embeddings":
        return encoder_outputs["embedding_output"]
    if mode == "concat_embeddings_and_all":
        return tf.concat([encoder_outputs["embedding_output"], *layers], axis=-1)
    if mode.startswith("weighted_"):
        if scalar_mix is None:
            raise ValueError(f"feature layers {mode!r} need a ScalarMix")
        return scalar_mix(layers[-4:] if mode == "weighted_sum_last_four" else layers)
    return combine_layers(layers, mode)


@register
class FeatureBasedTagger(DummyBatchBuilt, keras.Model):
    """Frozen BERT features → `lstm_layers` BiLSTM layers → dropout → linear tag classifier.

    Inputs: the encoder inputs, int32 [batch, seq] (`input_mask` also masks the BiLSTMs, so
    padding never enters the backward direction). Outputs: `logits` [batch, seq, num_labels].

    Args:
      config: the BERT config.
      num_labels: number of tags.
      feature_layers: one of `FEATURE_LAYERS`.
      lstm_units: units of each direction of each BiLSTM layer (768 in the paper).
      lstm_layers: number of stacked BiLSTM layers (2 in the paper).
      dropout_rate: dropout on the features and before the classifier.
      encoder: an existing `BertEncoder` to use (it is set non-trainable).
    """

    def __init__(self, config: BertConfig, num_labels: int,
                 feature_layers: str = "concat_last_four", lstm_units: int = 768,
                 lstm_layers: int = 2, dropout_rate: float = 0.1,
                 encoder: BertEncoder | None = None, **kwargs):
        kwargs.setdefault("name", "feature_based_tagger")
        super().__init__(**kwargs)
        feature_size(feature_layers, config.hidden_size, config.num_hidden_layers)
        _needs_layers(feature_layers, config.num_hidden_layers)
        if lstm_units <= 0 or lstm_layers <= 0:
            raise ValueError(f"lstm_units and lstm_layers must be positive, got {lstm_units}, "
                             f"{lstm_layers}")
        self.config = config
        self.num_labels = num_labels
        self.feature_layers = feature_layers
        self.lstm_units = lstm_units
        self.lstm_layers = lstm_layers
        self.dropout_rate = dropout_rate
        self.encoder = encoder or BertEncoder(config)
        self.encoder.trainable = False
        self.scalar_mix = None
        if feature_layers == "weighted_sum_last_four":
            self.scalar_mix = ScalarMix(4, name="scalar_mix")
        elif feature_layers == "weighted_sum_all":
            self.scalar_mix = ScalarMix(config.num_hidden_layers, name="scalar_mix")
        self.feature_dropout = BertDropout(dropout_rate, name="feature_dropout")
        self.bilstms = [
            keras.layers.Bidirectional(
                keras.layers.LSTM(lstm_units, return_sequences=True, name=f"lstm_{i}"),
                name=f"bilstm_{i}")
            for i in range(lstm_layers)]
        self.output_dropout = BertDropout(dropout_rate, name="output_dropout")
        self.classifier = keras.layers.Dense(
            num_labels, name="classifier",
            kernel_initializer=keras.initializers.TruncatedNormal(
                stddev=config.initializer_range))

    def get_config(self) -> dict:
        return {**super().get_config(), "config": self.config.to_dict(),
                "num_labels": self.num_labels, "feature_layers": self.feature_layers,
                "lstm_units": self.lstm_units, "lstm_layers": self.lstm_layers,
                "dropout_rate": self.dropout_rate,
                "encoder": keras.saving.serialize_keras_object(self.encoder)}

    @classmethod
    def from_config(cls, config: dict):
        return cls(**init_kwargs_from_saved(config))

    def call(self, inputs: Mapping[str, tf.Tensor], training: bool | None = None) -> dict:
        inputs = canonical_inputs(inputs)
        encoder_outputs = self.encoder(inputs, training=False)  # frozen: no dropout
        frozen = {"embedding_output": tf.stop_gradient(encoder_outputs["embedding_output"]),
                  "encoder_outputs": [tf.stop_gradient(x)
                                      for x in encoder_outputs["encoder_outputs"]]}
        x = select_features(frozen, self.feature_layers, self.scalar_mix)
        x = self.feature_dropout(x, training=training)
        mask = tf.cast(inputs["input_mask"], tf.bool)
        for bilstm in self.bilstms:
            x = bilstm(x, mask=mask, training=training)
        x = self.output_dropout(x, training=training)
        return {"logits": self.classifier(x)}

    def build_from_config_shapes(self, seq_len: int = 2) -> "FeatureBasedTagger":
        """Creates every variable with a dummy batch; returns self."""
        ids = tf.zeros([1, seq_len], tf.int32)
        self({"input_word_ids": ids, "input_mask": ids + 1, "input_type_ids": ids})
        return self
