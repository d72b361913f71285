"""tensorflow-datasets helpers every TFDS source shares (tasks' and the pretraining corpus')."""
from __future__ import annotations

from bert_tf.errors import UserInputError


class TfdsSourceError(UserInputError):
    """A TFDS dataset that is not prepared, unknown or does not fit the task."""


def tfds_module():
    """tensorflow_datasets, imported on first use (it is slow to import)."""
    import tensorflow_datasets as tfds

    return tfds


def text(value) -> str:
    """A TFDS text feature (bytes from `tfds.as_numpy`) as str."""
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)
