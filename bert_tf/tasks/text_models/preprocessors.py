"""`BertTextPreprocessor`: raw strings (or pairs of strings) -> BERT's packed token ids, as a
serializable Keras layer whose vocab travels inside the `.keras` file.

The layer holds the WordPiece vocab as a list of tokens in its config (not a path), so a saved
task model reads text after `keras.models.load_model` on any machine. Tokenization is the
`InGraphTokenizer` (the original `FullTokenizer`'s ids, in-graph) and packing is the export's
`BertPacker` (the original `convert_single_example`: [CLS] A [SEP] (B [SEP]), pairs truncated
longest-first), so the ids the Keras model trains on equal those of its raw-text SavedModel
export (`bert_tf.export.preprocessor.BertPreprocessor`) and of the original's scripts.

    pre = BertTextPreprocessor(tokens, sequence_length=128)
    pre(tf.constant(["a sentence"]))                       # single texts, tf.string [B]
    pre(tf.constant([["premise", "hypothesis"]]))          # pairs, tf.string [B, 2]
    pre((tf.constant(["premise"]), tf.constant(["hyp"])))  # pairs as two [B] tensors
    -> {"input_word_ids", "input_mask", "input_type_ids"}: int32 [B, sequence_length]
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from typing import Any, Sequence

import keras
import numpy as np
import tensorflow as tf

from bert_tf.errors import UserInputError

__all__ = ["BertTextPreprocessor", "write_vocab_file", "as_text_array"]

_REQUIRED_TOKENS = ("[UNK]", "[CLS]", "[SEP]")
_VOCAB_DIRS: list[str] = []


def _remove_vocab_dirs() -> None:
    for path in _VOCAB_DIRS:
        shutil.rmtree(path, ignore_errors=True)


atexit.register(_remove_vocab_dirs)


def write_vocab_file(tokens: Sequence[str], folder: str | None = None) -> str:
    """Writes `tokens` one per line (token i on line i) into `folder` (default: a private
    temporary folder removed when the process exits) and returns the file's path."""
    if folder is None:
        folder = tempfile.mkdtemp(prefix="bert_tf_vocab_")
        _VOCAB_DIRS.append(folder)
    path = os.path.join(folder, "vocab.txt")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("".join(f"{t}\n" for t in tokens))
    return path


def as_text_array(texts: Any, what: str = "x") -> np.ndarray:
    """Python strings in the shapes users pass -> a numpy object array [N] (single texts) or
    [N, 2] (pairs).

    Accepted: a str (one text), a list / numpy array of str or bytes [N], a list of
    (text_a, text_b) pairs or an array [N, 2], a tuple (texts_a, texts_b) of two equally long
    sequences, a dict {"text_a": [...], "text_b": [...]}.

    Raises:
      UserInputError naming `what` and the shape it got.
    """
    if isinstance(texts, dict):
        if set(texts) != {"text_a", "text_b"}:
            raise UserInputError(f"{what}: a dict of texts needs exactly the keys 'text_a' and "
                                 f"'text_b'; got {sorted(texts)}")
        texts = (texts["text_a"], texts["text_b"])
    if isinstance(texts, tuple) and len(texts) == 2 and not isinstance(texts[0], (str, bytes)):
        a, b = (np.asarray(t, dtype=object).reshape(-1) for t in texts)
        if len(a) != len(b):
            raise UserInputError(f"{what}: the two text sequences of the pairs have {len(a)} and "
                                 f"{len(b)} items; they must be equally long")
        texts = np.stack([a, b], axis=1)
    if isinstance(texts, (str, bytes)):
        texts = [texts]
    array = np.asarray(texts, dtype=object)
    if array.ndim == 0 or array.ndim > 2 or (array.ndim == 2 and array.shape[1] != 2):
        raise UserInputError(f"{what}: expected texts [N] or text pairs [N, 2]; got an array of "
                             f"shape {list(array.shape)}")
    flat = array.reshape(-1)
    for i, value in enumerate(flat):
        if not isinstance(value, (str, bytes, np.str_, np.bytes_)):
            raise UserInputError(f"{what}: item {i // array.shape[-1] if array.ndim == 2 else i} "
                                 f"is {type(value).__name__} {value!r}; expected a string")
    return array


@keras.saving.register_keras_serializable(package="bert_tf")
class BertTextPreprocessor(keras.layers.Layer):
    """Raw text -> `input_word_ids`, `input_mask`, `input_type_ids` (int32 [batch, S]).

    Args:
      vocabulary: the WordPiece tokens in id order (token i has id i; e.g. the lines of
        `vocab.txt`); must contain [UNK], [CLS] and [SEP]. Stored in the layer's config.
      sequence_length: S, the packed length (>= 3).
      do_lower_case: as the original `FullTokenizer(do_lower_case=...)`.
      tokenizer_mode: `InGraphTokenizer`'s "exact" (the default, as the exports) or "fast"
        (the same ids; faster on large batches, slower to set up).

    Attributes: `cls_id`, `sep_id`, `pad_id` (0), `vocab_size`, `tokenizer` (the
    `InGraphTokenizer`, built on first use), `packer` (`BertPacker`).
    """

    def __init__(self, vocabulary: Sequence[str], sequence_length: int = 128,
                 do_lower_case: bool = True, tokenizer_mode: str = "exact", **kwargs):
        kwargs.setdefault("trainable", False)
        super().__init__(**kwargs)
        tokens = [str(t) for t in vocabulary]
        missing = [t for t in _REQUIRED_TOKENS if t not in tokens]
        if missing:
            raise UserInputError(f"BertTextPreprocessor: the vocabulary ({len(tokens)} tokens) "
                                 f"lacks {', '.join(missing)}; expected a BERT WordPiece vocab")
        if int(sequence_length) < 3:
            raise UserInputError(f"sequence_length must be >= 3 ([CLS] A [SEP] B [SEP]); got "
                                 f"{sequence_length}")
        object.__setattr__(self, "vocabulary", tokens)  # untracked: a plain list of str
        self.sequence_length = int(sequence_length)
        self.do_lower_case = bool(do_lower_case)
        self.tokenizer_mode = tokenizer_mode
        self.vocab_size = len(tokens)
        self.cls_id = tokens.index("[CLS]")
        self.sep_id = tokens.index("[SEP]")
        self.pad_id = 0
        self.built = True
        # Plain attributes (not tracked by Keras: rebuilt from the vocabulary after loading).
        object.__setattr__(self, "_tokenizer", None)
        object.__setattr__(self, "_packer", None)
        object.__setattr__(self, "_traced", None)

    def get_config(self) -> dict:
        return {**super().get_config(), "vocabulary": list(self.vocabulary),
                "sequence_length": self.sequence_length, "do_lower_case": self.do_lower_case,
                "tokenizer_mode": self.tokenizer_mode}

    @property
    def tokenizer(self):
        """The `InGraphTokenizer` over this vocabulary (built on first use)."""
        if self._tokenizer is None:
            from bert_tf.tokenization import InGraphTokenizer

            path = write_vocab_file(self.vocabulary)
            with tf.init_scope():  # eager tables even when first used inside a graph (tf.data)
                tokenizer = InGraphTokenizer(path, do_lower_case=self.do_lower_case,
                                             mode=self.tokenizer_mode)
            object.__setattr__(self, "_tokenizer", tokenizer)
        return self._tokenizer

    @property
    def packer(self):
        """The export's `BertPacker` (the original's packing and truncation)."""
        if self._packer is None:
            from bert_tf.export.preprocessor import BertPacker

            object.__setattr__(self, "_packer",
                               BertPacker(self.sequence_length, self.cls_id, self.sep_id))
        return self._packer

    def split_inputs(self, inputs) -> tuple[tf.Tensor, tf.Tensor | None]:
        """(text_a [B], text_b [B] or None) from the accepted input forms (module docstring)."""
        if isinstance(inputs, dict):
            return (tf.convert_to_tensor(inputs["text_a"], tf.string),
                    tf.convert_to_tensor(inputs["text_b"], tf.string))
        if isinstance(inputs, (tuple, list)) and len(inputs) == 2 and not isinstance(
                inputs[0], (str, bytes)):
            return (tf.convert_to_tensor(inputs[0], tf.string),
                    tf.convert_to_tensor(inputs[1], tf.string))
        texts = tf.convert_to_tensor(inputs, tf.string)
        if texts.shape.rank == 0:
            texts = texts[tf.newaxis]
        if texts.shape.rank == 1:
            return texts, None
        if texts.shape.rank == 2 and texts.shape[1] == 2:
            return texts[:, 0], texts[:, 1]
        raise UserInputError(f"BertTextPreprocessor: expected tf.string [batch] or pairs "
                             f"[batch, 2]; got shape {texts.shape}")

    def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """tf.string [B] -> int32 RaggedTensor [B, (pieces)] (the original's WordPiece ids)."""
        return self.tokenizer.tokenize(texts)

    def call(self, inputs) -> dict[str, tf.Tensor]:
        """Texts [B], pairs [B, 2] / (text_a, text_b) -> {"input_word_ids", "input_mask",
        "input_type_ids"}: int32 [B, sequence_length]."""
        text_a, text_b = self.split_inputs(inputs)
        pieces_b = None if text_b is None else self.tokenize(text_b)
        return self.packer.pack(self.tokenize(text_a), pieces_b)

    def pack(self, inputs) -> dict[str, tf.Tensor]:
        """`call` as two `tf.function`s with fixed input signatures (texts [None]; pairs as
        text_a, text_b [None] x 2), each traced once and reused by every `tf.data` pipeline
        of the task models (tracing the tokenizer costs seconds)."""
        if self._traced is None:
            text = tf.TensorSpec([None], tf.string)
            object.__setattr__(self, "_traced", {
                "single": tf.function(self.call, input_signature=[text], jit_compile=False),
                "pair": tf.function(lambda a, b: self.call((a, b)), jit_compile=False,
                                    input_signature=[text, text])})
        text_a, text_b = self.split_inputs(inputs)
        if text_b is None:
            return self._traced["single"](text_a)
        return self._traced["pair"](text_a, text_b)

    def compute_output_spec(self, inputs):
        shape = [None, self.sequence_length]
        return {k: keras.KerasTensor(shape, dtype="int32")
                for k in ("input_word_ids", "input_mask", "input_type_ids")}
