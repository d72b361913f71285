"""The masked token loss, one predicted tag per word, and the conlleval files and scores (see
`bert_tf.tasks.ner`)."""
from __future__ import annotations

import os
from typing import Sequence

from bert_tf import io_utils
from bert_tf.evaluation import conlleval
from bert_tf.tasks.ner.features import NerFeature
from bert_tf.tasks.ner.reading import NerSentence


# ---------------------------------------------------------------------------------------------
# Loss and predictions
# ---------------------------------------------------------------------------------------------
def token_classification_loss(logits, label_ids):
    """Mean cross-entropy over the labelled positions of a batch.

    Args:
      logits: float [batch, seq, num_labels].
      label_ids: int [batch, seq]; `IGNORE_LABEL` (any negative id) marks positions without loss.

    Returns:
      Scalar float32: Σ over labelled positions of -log p(label) / max(1, number of labelled
      positions).
    """
    import tensorflow as tf

    loss_sum, count = token_classification_loss_parts(logits, label_ids)
    return loss_sum / tf.maximum(count, 1.0)


def token_classification_loss_parts(logits, label_ids):
    """(Σ over labelled positions of -log p(label), number of labelled positions), float32
    scalars: `token_classification_loss` is their ratio (count at least 1)."""
    import tensorflow as tf

    logits = tf.cast(logits, tf.float32)
    label_ids = tf.cast(label_ids, tf.int32)
    weights = tf.cast(label_ids >= 0, tf.float32)
    safe_ids = tf.maximum(label_ids, 0)
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    nll = -tf.gather(log_probs, safe_ids, batch_dims=2)
    return tf.reduce_sum(weights * nll), tf.reduce_sum(weights)


def ner_loss_fn(outputs: dict, batch: dict):
    """`LossFn` for `bert_tf.training.finetuning.train_model`: the parts of
    `token_classification_loss` of outputs["logits"] and batch["label_ids"], so that over several
    replicas the loss is the global batch's mean over its labelled tokens exactly."""
    return token_classification_loss_parts(outputs["logits"], batch["label_ids"])


def numpy_token_loss(logits, label_ids) -> float:
    """`token_classification_loss` in NumPy (for evaluation of predicted logits)."""
    import numpy as np

    logits = logits.astype(np.float64)
    logits = logits - logits.max(axis=-1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
    mask = label_ids >= 0
    if not mask.any():
        return 0.0
    picked = np.take_along_axis(log_probs, np.maximum(label_ids, 0)[..., None], axis=-1)[..., 0]
    return float(-(picked[mask]).sum() / mask.sum())


def word_predictions(features: Sequence[NerFeature], predicted_ids, sentences:
                     Sequence[NerSentence], label_list: Sequence[str]) -> list[list[str]]:
    """One predicted tag per word, read at the word's first sub-token in its max-context window.

    Args:
      features: the features the model was run on (in the same order as `predicted_ids`).
      predicted_ids: int [num_features, max_seq_length] (argmax of the logits).
      sentences: the sentences the features came from.
      label_list: label id -> tag.

    Returns:
      For every sentence, its predicted tags (as many as words).
    """
    predictions: list[list[str | None]] = [[None] * len(s.words) for s in sentences]
    for feature, ids in zip(features, predicted_ids):
        row = predictions[feature.sentence_index]
        for pos, (word, use) in enumerate(zip(feature.word_index, feature.predict_mask)):
            if use:
                row[word] = label_list[int(ids[pos])]
    for s, row in zip(sentences, predictions):
        if any(tag is None for tag in row):
            raise AssertionError(f"{s.source}:{s.lines[0]}: a word got no prediction (the "
                                 "features do not cover the sentence)")
    return predictions  # type: ignore[return-value]


def write_conlleval_file(path: str | os.PathLike, sentences: Sequence[NerSentence],
                         predictions: Sequence[Sequence[str]]) -> None:
    """Writes `token gold predicted` (or `token predicted` without gold tags), one word a line,
    a blank line after each sentence: the input format of conlleval. Written atomically."""
    from bert_tf.io_utils import atomic_output_path

    with atomic_output_path(path) as tmp:
        with io_utils.open_file(tmp, "w", encoding="utf-8") as f:
            for s, preds in zip(sentences, predictions):
                if len(preds) != len(s.words):
                    raise ValueError(f"{s.source}:{s.lines[0]}: {len(s.words)} words but "
                                     f"{len(preds)} predictions")
                for i, (word, pred) in enumerate(zip(s.words, preds)):
                    if s.labels is not None:
                        f.write(f"{word} {s.labels[i]} {pred}\n")
                    else:
                        f.write(f"{word} {pred}\n")
                f.write("\n")


def score_predictions(sentences: Sequence[NerSentence], predictions: Sequence[Sequence[str]]
                      ) -> conlleval.ConllEvalResult:
    """conlleval's entity-level counts of predicted vs gold tags."""
    return conlleval.evaluate([s.labels for s in sentences], predictions)
