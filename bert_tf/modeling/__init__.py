"""The BERT model: config, layers, encoder, heads, pretraining losses and encoder+head models.

Three tiers, as in TF Model Garden: layers (`embeddings`, `attention`, `transformer`) → the
network (`encoder.BertEncoder`) → models (`models.*`: encoder + head). Every layer and model is
registered for Keras serialization (`bert_tf>ClassName`) and round-trips through `.keras` files,
its `BertConfig` inside its Keras config (see `serialization`); importing this package registers
them for `keras.models.load_model`.
"""
from bert_tf.modeling.activations import gelu, gelu_exact, gelu_xla, get_activation
from bert_tf.modeling.attention import BertSelfAttention, attention_mask_adder
from bert_tf.modeling.config import BertConfig, ConfigError
from bert_tf.modeling.embeddings import BertEmbeddings
from bert_tf.modeling.encoder import BertEncoder, ModelInputError, canonical_inputs
from bert_tf.modeling.heads import (ClassificationHead, MaskedLMHead, MultipleChoiceHead,
                                    NextSentenceHead, SpanHead, TokenClassificationHead,
                                    gather_indexes)
from bert_tf.modeling.losses import masked_lm_loss, next_sentence_loss
from bert_tf.modeling.models import (PRETRAINING_LABEL_KEYS, BertClassifier, BertMultipleChoice,
                                     BertPretrainer, BertSpanLabeler, BertTokenClassifier)
from bert_tf.modeling.transformer import BertTransformerBlock

__all__ = [
    "BertClassifier", "BertConfig", "BertEmbeddings", "BertEncoder", "BertMultipleChoice",
    "BertPretrainer", "BertSelfAttention", "BertSpanLabeler", "BertTokenClassifier",
    "BertTransformerBlock", "ClassificationHead", "ConfigError", "MaskedLMHead",
    "ModelInputError", "MultipleChoiceHead", "NextSentenceHead", "PRETRAINING_LABEL_KEYS",
    "SpanHead", "TokenClassificationHead",
    "attention_mask_adder", "canonical_inputs", "gather_indexes", "gelu", "gelu_exact", "gelu_xla",
    "get_activation", "masked_lm_loss", "next_sentence_loss",
]
