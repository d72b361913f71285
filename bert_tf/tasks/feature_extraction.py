"""Feature extraction: contextual embeddings of chosen encoder layers, as the original
`extract_features.py` computes and writes them (one JSON object per input line)."""
from __future__ import annotations

import collections
import dataclasses
import json
import re
from typing import Iterable, Iterator, Sequence

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf.errors import UserInputError
from bert_tf import io_utils
from bert_tf.io_utils import atomic_output_path
from bert_tf.modeling import BertEncoder
from bert_tf.training.length_batching import DEFAULT_LENGTH_MULTIPLE, round_up_length
from bert_tf.tokenization.packing import PackedInput, pack_tokens

_PAIR_RE = re.compile(r"^(.*) \|\|\| (.*)$")

LAYER_COMBINATIONS = ("last", "second_to_last", "sum_last_four", "concat_last_four", "sum_all")


@dataclasses.dataclass
class InputExample:
    """A line of input: `text_a`, or `text_a ||| text_b`; `unique_id` is the line number from 0."""

    unique_id: int
    text_a: str
    text_b: str | None = None


def parse_line(unique_id: int, line: str) -> InputExample:
    """Splits `text_a ||| text_b` (the original's format); other lines are a single segment."""
    line = line.strip()
    m = _PAIR_RE.match(line)
    if m:
        return InputExample(unique_id, m.group(1), m.group(2))
    return InputExample(unique_id, line)


def read_examples(input_file: str) -> list[InputExample]:
    """Reads one example per line (UTF-8); errors name the file and line."""
    examples = []
    with io_utils.open_file(input_file, "rb") as f:
        for i, raw in enumerate(f):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise UserInputError(f"{input_file}:{i + 1}: not valid UTF-8 ({e.reason} at "
                                     f"byte {e.start})") from e
            examples.append(parse_line(i, line))
    return examples


def pack_examples(examples: Iterable[InputExample], tokenizer, max_seq_length: int
                  ) -> list[PackedInput]:
    """Tokenizes and packs examples as the original `convert_examples_to_features`."""
    packed = []
    for ex in examples:
        tokens_a = tokenizer.tokenize(ex.text_a)
        tokens_b = tokenizer.tokenize(ex.text_b) if ex.text_b is not None else None
        p = pack_tokens(tokens_a, tokens_b, max_seq_length, tokenizer.vocab)
        if ex.unique_id < 5:
            logging.info("unique_id: %s tokens: %s", ex.unique_id, " ".join(p.tokens))
        packed.append(p)
    return packed


def combine_layers(encoder_outputs: Sequence[tf.Tensor], mode: str) -> tf.Tensor:
    """Feature-based combinations of the paper's NER ablation.

    Args:
      encoder_outputs: L tensors [batch, seq, H].
      mode: "last", "second_to_last", "sum_last_four", "concat_last_four" ([batch, seq, 4H]) or
        "sum_all".

    Returns: [batch, seq, H] (or [batch, seq, 4H] for concat).
    """
    if mode == "last":
        return encoder_outputs[-1]
    if mode == "second_to_last":
        return encoder_outputs[-2]
    if mode == "sum_last_four":
        return tf.add_n(list(encoder_outputs[-4:]))
    if mode == "concat_last_four":
        return tf.concat(list(encoder_outputs[-4:]), axis=-1)
    if mode == "sum_all":
        return tf.add_n(list(encoder_outputs))
    raise ValueError(f"unknown layer combination {mode!r}; expected one of {LAYER_COMBINATIONS}")


def parse_layer_indexes(layers: str, num_layers: int) -> list[int]:
    """Parses `--layers` ("-1,-2,-3,-4"); each index must address one of `num_layers` layers."""
    try:
        indexes = [int(x) for x in layers.split(",")]
    except ValueError:
        raise UserInputError(f"--layers must be comma-separated integers, got {layers!r}") from None
    for i in indexes:
        if not -num_layers <= i < num_layers:
            raise UserInputError(f"--layers index {i} is out of range for a model with {num_layers} "
                             "layers")
    return indexes


def extract_features(encoder: BertEncoder, tokenizer, examples: Sequence[InputExample],
                     layer_indexes: Sequence[int], max_seq_length: int = 128,
                     batch_size: int = 32) -> Iterator[dict]:
    """Runs the encoder and yields, per example, the original's JSON record.

    Each record: {"linex_index": unique_id, "features": [{"token": t, "layers": [{"index": i,
    "values": [... rounded to 6 decimals]}, ...]}, ...]} for the non-padding tokens.
    """
    packed = pack_examples(examples, tokenizer, max_seq_length)

    @tf.function(reduce_retracing=True)
    def run(ids, mask, types):
        out = encoder({"input_word_ids": ids, "input_mask": mask, "input_type_ids": types},
                      training=False)
        # float32 values under a 16-bit policy too (the JSON holds 6 decimals of them)
        return tf.cast(tf.stack([out["encoder_outputs"][i] for i in layer_indexes]), tf.float32)

    for start in range(0, len(packed), batch_size):
        chunk = packed[start:start + batch_size]
        # Cut to the batch's longest example, rounded up to DEFAULT_LENGTH_MULTIPLE: the real
        # tokens' features are the same at any padding (tasks/length_batching.py).
        length = round_up_length(max(len(p.tokens) for p in chunk), DEFAULT_LENGTH_MULTIPLE,
                                 max_seq_length)
        arrays = [tf.constant([getattr(p, name)[:length] for p in chunk], tf.int32)
                  for name in ("input_ids", "input_mask", "segment_ids")]
        layers = run(*arrays).numpy()  # [n_layers, batch, length, H]
        for b, p in enumerate(chunk):
            features = []
            for t, token in enumerate(p.tokens):
                features.append(collections.OrderedDict(
                    token=token,
                    layers=[collections.OrderedDict(
                        index=layer_index,
                        values=[round(float(x), 6) for x in layers[j, b, t]])
                        for j, layer_index in enumerate(layer_indexes)]))
            yield collections.OrderedDict(linex_index=examples[start + b].unique_id,
                                          features=features)


def write_features(records: Iterable[dict], output_file: str) -> int:
    """Writes JSON lines atomically; returns the number of records."""
    n = 0
    with atomic_output_path(output_file) as tmp:
        with io_utils.open_file(tmp, "w", encoding="utf-8") as f:
            for record in records:
                f.write(json.dumps(record) + "\n")
                n += 1
    return n


def features_as_array(record: dict) -> np.ndarray:
    """[num_tokens, num_layers, H] float32 view of one JSON record (handy for tests and users)."""
    return np.array([[layer["values"] for layer in feat["layers"]] for feat in record["features"]],
                    dtype=np.float32)
