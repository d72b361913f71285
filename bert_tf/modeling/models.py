"""Encoder + head compositions: the pretraining model and the paper's fine-tuning models.

Each model owns a `BertEncoder` as `.encoder` and its head(s); each `call` returns a dict of named
tensors so that losses, metrics and SavedModel signatures refer to outputs by name. The fine-tuning
models return exactly their predictions (`logits`, or `start_logits` and `end_logits`; float32
under a mixed-precision policy too), so that `compile(loss=..., metrics=...)` pairs them with the
labels as Keras does for any model (a plain label array for a one-output model, or a dict keyed by
output name). Every model round-trips
through `.keras` (`model.save`, `keras.models.load_model`); see `serialization`.

Input dicts take the encoder's keys (`input_word_ids`, `input_mask`, `input_type_ids`, or the
original's `input_ids`, `segment_ids` / `token_type_ids`); `BertPretrainer` also
`masked_lm_positions` and, unread, the labels of a pretraining batch (`PRETRAINING_LABEL_KEYS`).
Any other key is one `ModelInputError` naming the accepted ones (`encoder.canonical_inputs`): a
typo is never dropped silently. Fine-tuning loops pass only the model's inputs
(`training.finetuning` selects `input_keys` from each batch).
"""
from __future__ import annotations

from typing import Mapping

import keras
import tensorflow as tf

from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.encoder import BertEncoder, CheckedInputs, canonical_inputs
from bert_tf.modeling.heads import (ClassificationHead, MaskedLMHead, MultipleChoiceHead,
                                    NextSentenceHead, SpanHead, TokenClassificationHead)
from bert_tf.modeling.serialization import DummyBatchBuilt, init_kwargs_from_saved, register


def _float32(logits: tf.Tensor) -> tf.Tensor:
    """A fine-tuning model's logits in float32 under a 16-bit policy (probabilities, losses,
    n-best spans and metrics from full-precision logits, as Keras' mixed-precision guide has the
    last layer); a no-op in float32."""
    return tf.cast(logits, tf.float32)


# Read when a classifier's function traces: False computes the last block at every position
# (the output is the same; `bench/profile_finetune.py --modes cls_only_alternating` times both).
CLS_ONLY_LAST_BLOCK = True


def pooled_only_kwargs(encoder) -> dict:
    """The encoder call's `pooled_only=True` (its last block at [CLS] only: a classifier, or a
    [CLS] / pooler embedding, reads nothing else) for a `BertEncoder`; nothing for another
    encoder (e.g. a SavedModel's), or when `CLS_ONLY_LAST_BLOCK` is off."""
    return {"pooled_only": True} if CLS_ONLY_LAST_BLOCK and isinstance(encoder, BertEncoder) \
        else {}


# The labels a pretraining batch holds beside the model inputs (the original's feature names): the
# pretraining loop passes whole batches, its loss reads these.
PRETRAINING_LABEL_KEYS = ("masked_lm_ids", "masked_lm_weights", "next_sentence_labels")


def _dummy_inputs(seq_len: int = 2, batch: int = 1) -> dict[str, tf.Tensor]:
    ids = tf.zeros([batch, seq_len], tf.int32)
    return {"input_word_ids": ids, "input_mask": ids + 1, "input_type_ids": ids}


@register
class BertPretrainer(CheckedInputs, DummyBatchBuilt, keras.Model):
    """Encoder + masked-LM head + next-sentence head (`bert/*` and `cls/*` in the original).

    Inputs: the encoder inputs plus `masked_lm_positions` int [batch, P]; the labels
    `masked_lm_ids`, `masked_lm_weights`, `next_sentence_labels` may be in the dict too (the
    pretraining loop passes whole batches) and are not read. Any other key is an error.
    Outputs: `masked_lm_logits` [batch, P, vocab], `next_sentence_logits` [batch, 2], and the
    encoder's outputs (`sequence_output`, `pooled_output`, ...).

    `last_layer_at_predictions_only=True` computes the last transformer block only at [CLS] and
    the P masked positions, the only rows the two heads read (see `BertEncoder`): the same
    logits up to float rounding (dropout draws differ) for about (1 - (P+1)/seq) of the last
    block's work: +20% training steps/s at L=4, seq 128, P=20 (bench/, README). The encoder's outputs then
    hold `sequence_output_at_positions` [batch, P, H] instead of `sequence_output`. False (the
    default) computes every position, as the original does. `xla_gelu_in_training` is passed
    to a new encoder (see `BertEncoder`).
    """

    input_extra_keys = input_required_keys = ("masked_lm_positions",)
    input_ignored_keys = PRETRAINING_LABEL_KEYS

    def __init__(self, config: BertConfig, encoder: BertEncoder | None = None,
                 last_layer_at_predictions_only: bool = False,
                 xla_gelu_in_training: bool = False, **kwargs):
        kwargs.setdefault("name", "bert_pretrainer")
        super().__init__(**kwargs)
        self.config = config
        self.last_layer_at_predictions_only = last_layer_at_predictions_only
        self.xla_gelu_in_training = xla_gelu_in_training
        self.encoder = encoder or BertEncoder(config, xla_gelu_in_training=xla_gelu_in_training)
        self.masked_lm = MaskedLMHead(config, None, xla_in_training=xla_gelu_in_training)
        self.next_sentence = NextSentenceHead(config)

    def get_config(self) -> dict:
        return {**super().get_config(), "config": self.config.to_dict(),
                "encoder": keras.saving.serialize_keras_object(self.encoder),
                "last_layer_at_predictions_only": self.last_layer_at_predictions_only,
                "xla_gelu_in_training": self.xla_gelu_in_training}

    @classmethod
    def from_config(cls, config: dict):
        return cls(**init_kwargs_from_saved(config))

    def build(self, input_shape=None) -> None:
        if not self.encoder.built:
            self.encoder.build_from_config_shapes()
        self.masked_lm.embedding_table = self.encoder.word_embeddings
        self.masked_lm.build(None)
        self.next_sentence.build(None)
        self.built = True

    def call(self, inputs: Mapping[str, tf.Tensor], training: bool | None = None,
             return_attention_probs: bool = False) -> dict:
        if self.masked_lm.embedding_table is None:
            self.masked_lm.embedding_table = self.encoder.word_embeddings
        encoder_inputs = canonical_inputs(inputs, self.input_extra_keys,
                                          self.input_ignored_keys, owner=type(self).__name__)
        positions = inputs["masked_lm_positions"]
        pruned = self.last_layer_at_predictions_only
        outputs = dict(self.encoder(encoder_inputs, training=training,
                                    return_attention_probs=return_attention_probs,
                                    output_positions=positions if pruned else None))
        outputs["masked_lm_logits"] = (
            self.masked_lm(outputs["sequence_output_at_positions"], None) if pruned
            else self.masked_lm(outputs["sequence_output"], positions))
        outputs["next_sentence_logits"] = self.next_sentence(outputs["pooled_output"])
        return outputs

    def build_from_config_shapes(self, seq_len: int = 2) -> "BertPretrainer":
        """Creates every variable with a dummy batch; returns self."""
        inputs = _dummy_inputs(seq_len)
        inputs["masked_lm_positions"] = tf.zeros([1, 1], tf.int32)
        self(inputs)
        return self


@register
class BertClassifier(CheckedInputs, DummyBatchBuilt, keras.Model):
    """Sentence(-pair) classification or regression (GLUE): outputs `logits` [batch, num_labels].

    (The [CLS] vector it classifies is `model.encoder(inputs)["pooled_output"]`.)
    """

    def __init__(self, config: BertConfig, num_labels: int, encoder: BertEncoder | None = None,
                 dropout_rate: float = 0.1, **kwargs):
        kwargs.setdefault("name", "bert_classifier")
        super().__init__(**kwargs)
        self.config = config
        self.num_labels = num_labels
        self.encoder = encoder or BertEncoder(config)
        self.classifier = ClassificationHead(config, num_labels, dropout_rate)

    def get_config(self) -> dict:
        return {**super().get_config(), "config": self.config.to_dict(),
                "encoder": keras.saving.serialize_keras_object(self.encoder),
                "num_labels": self.num_labels, "dropout_rate": self.classifier.dropout.rate}

    @classmethod
    def from_config(cls, config: dict):
        return cls(**init_kwargs_from_saved(config))

    def call(self, inputs: Mapping[str, tf.Tensor], training: bool | None = None) -> dict:
        inputs = canonical_inputs(inputs, owner=type(self).__name__)
        outputs = self.encoder(inputs, training=training, **pooled_only_kwargs(self.encoder))
        return {"logits": _float32(self.classifier(outputs["pooled_output"], training=training))}

    def build_from_config_shapes(self, seq_len: int = 2) -> "BertClassifier":
        self(_dummy_inputs(seq_len))
        return self


@register
class BertSpanLabeler(CheckedInputs, DummyBatchBuilt, keras.Model):
    """SQuAD: outputs `start_logits` and `end_logits`, each [batch, seq_len]."""

    def __init__(self, config: BertConfig, encoder: BertEncoder | None = None, **kwargs):
        kwargs.setdefault("name", "bert_span_labeler")
        super().__init__(**kwargs)
        self.config = config
        self.encoder = encoder or BertEncoder(config)
        self.span = SpanHead(config)

    def get_config(self) -> dict:
        return {**super().get_config(), "config": self.config.to_dict(),
                "encoder": keras.saving.serialize_keras_object(self.encoder)}

    @classmethod
    def from_config(cls, config: dict):
        return cls(**init_kwargs_from_saved(config))

    def call(self, inputs: Mapping[str, tf.Tensor], training: bool | None = None) -> dict:
        inputs = canonical_inputs(inputs, owner=type(self).__name__)
        outputs = self.encoder(inputs, training=training)
        start, end = self.span(outputs["sequence_output"])
        return {"start_logits": _float32(start), "end_logits": _float32(end)}

    def build_from_config_shapes(self, seq_len: int = 2) -> "BertSpanLabeler":
        self(_dummy_inputs(seq_len))
        return self


@register
class BertTokenClassifier(CheckedInputs, DummyBatchBuilt, keras.Model):
    """Token labelling (CoNLL-2003 NER): outputs `logits` [batch, seq_len, num_labels]."""

    def __init__(self, config: BertConfig, num_labels: int, encoder: BertEncoder | None = None,
                 dropout_rate: float = 0.1, **kwargs):
        kwargs.setdefault("name", "bert_token_classifier")
        super().__init__(**kwargs)
        self.config = config
        self.num_labels = num_labels
        self.encoder = encoder or BertEncoder(config)
        self.token_classifier = TokenClassificationHead(config, num_labels, dropout_rate)

    def get_config(self) -> dict:
        return {**super().get_config(), "config": self.config.to_dict(),
                "encoder": keras.saving.serialize_keras_object(self.encoder),
                "num_labels": self.num_labels, "dropout_rate": self.token_classifier.dropout.rate}

    @classmethod
    def from_config(cls, config: dict):
        return cls(**init_kwargs_from_saved(config))

    def call(self, inputs: Mapping[str, tf.Tensor], training: bool | None = None) -> dict:
        inputs = canonical_inputs(inputs, owner=type(self).__name__)
        outputs = self.encoder(inputs, training=training)
        return {"logits": _float32(self.token_classifier(outputs["sequence_output"],
                                                         training=training))}

    def build_from_config_shapes(self, seq_len: int = 2) -> "BertTokenClassifier":
        self(_dummy_inputs(seq_len))
        return self


@register
class BertMultipleChoice(CheckedInputs, DummyBatchBuilt, keras.Model):
    """SWAG-style multiple choice.

    Inputs: encoder inputs of shape [batch, num_choices, seq_len]. Outputs `logits` [batch, num_choices].
    """

    def __init__(self, config: BertConfig, num_choices: int = 4, encoder: BertEncoder | None = None,
                 dropout_rate: float = 0.1, **kwargs):
        kwargs.setdefault("name", "bert_multiple_choice")
        super().__init__(**kwargs)
        self.config = config
        self.num_choices = num_choices
        self.encoder = encoder or BertEncoder(config)
        self.multiple_choice = MultipleChoiceHead(config, num_choices, dropout_rate)

    def get_config(self) -> dict:
        return {**super().get_config(), "config": self.config.to_dict(),
                "encoder": keras.saving.serialize_keras_object(self.encoder),
                "num_choices": self.num_choices, "dropout_rate": self.multiple_choice.dropout.rate}

    @classmethod
    def from_config(cls, config: dict):
        return cls(**init_kwargs_from_saved(config))

    def call(self, inputs: Mapping[str, tf.Tensor], training: bool | None = None) -> dict:
        inputs = canonical_inputs(inputs, owner=type(self).__name__)
        flat = {k: tf.reshape(v, [-1, tf.shape(v)[-1]]) for k, v in inputs.items()}
        outputs = self.encoder(flat, training=training, **pooled_only_kwargs(self.encoder))
        return {"logits": _float32(self.multiple_choice(outputs["pooled_output"],
                                                        training=training))}

    def build_from_config_shapes(self, seq_len: int = 2) -> "BertMultipleChoice":
        inputs = {k: tf.tile(v[:, tf.newaxis], [1, self.num_choices, 1])
                  for k, v in _dummy_inputs(seq_len).items()}
        self(inputs)
        return self
