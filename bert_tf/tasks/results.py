"""What the fine-tuning scripts write: eval_results.txt ("key = value" lines, as the original) and
class probabilities from logits."""
from __future__ import annotations

import os
from typing import Any, Mapping

import numpy as np


def format_eval_results(results: Mapping[str, Any]) -> str:
    """The original eval_results.txt: "key = value" lines in sorted key order."""
    return "".join(f"{key} = {results[key]}\n" for key in sorted(results))


def write_eval_results(path: str, results: Mapping[str, Any]) -> None:
    """Writes `format_eval_results(results)` to `path` atomically."""
    from bert_tf.io_utils import atomic_write_text

    atomic_write_text(path, format_eval_results(results))


def write_train_results(output_dir: str, train: Mapping[str, Any]) -> None:
    """`<output_dir>/train_results.txt`: the first and last training loss and the global step of
    `bert_tf.training.finetuning.train_model`'s result."""
    write_eval_results(os.path.join(output_dir, "train_results.txt"),
                       {"first_loss": train["first_loss"], "loss": train["loss"],
                        "global_step": train["global_step"]})


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax of logits [N, C] in float64 (the probabilities the result files hold)."""
    z = np.asarray(logits).astype(np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)
