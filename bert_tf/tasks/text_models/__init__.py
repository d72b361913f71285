"""Raw-text Keras task models: the tokenizer inside, `fit`/`predict` on strings, `.keras` files
that carry their vocab, raw-text SavedModel exports (docs/text_models.md).

  BertTextPreprocessor  strings / pairs -> packed ids (a serializable Keras layer, vocab inside)
  BertTextClassifier    texts or pairs -> class probabilities (or regression values)
  BertTextEmbedder      texts -> L2-normalised sentence vectors ([CLS] or mean pooling)
  BertTextTokenClassifier  words -> one label per word (NER; BERT's first-piece recipe)
  GptTextClassifier     GPT-1 on texts, pairs or (context, choices): the paper's input
                        transformations inside (GptTextPreprocessor), the auxiliary LM loss
  BertQuestionAnswerer  question + context -> answer text, character span, score (SQuAD's
                        doc_stride windows and post-processing)

Names are imported on first use (this package's import does not import TensorFlow).
"""
from __future__ import annotations

import importlib

_LAZY = {
    "BertTextPreprocessor": "bert_tf.tasks.text_models.preprocessors",
    "BertTextClassifier": "bert_tf.tasks.text_models.text_classifier",
    "BertTextEmbedder": "bert_tf.tasks.text_models.text_embedder",
    "BertTextTokenClassifier": "bert_tf.tasks.text_models.token_classifier",
    "GptTextPreprocessor": "bert_tf.tasks.text_models.gpt_preprocessor",
    "GptTextClassifier": "bert_tf.tasks.text_models.gpt_text_classifier",
    "BertQuestionAnswerer": "bert_tf.tasks.text_models.question_answerer",
}
__all__ = list(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
