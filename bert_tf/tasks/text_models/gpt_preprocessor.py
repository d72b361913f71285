"""`GptTextPreprocessor`: raw strings -> GPT-1's transformed inputs (the paper's §3.3), as a
serializable Keras layer whose BPE vocabulary, merges and text rules travel inside the `.keras`
file.

    pre = GptTextPreprocessor(vocabulary, merges, sequence_length=64,
                              input_transform="entailment")
    pre((tf.constant(["premise"]), tf.constant(["hypothesis"])))
    -> {"token_ids": int32 [B, S], "mask": float32 [B, S]}

| input_transform | input | token_ids / mask |
|---|---|---|
| "single"          | texts [B]                                       | [B, S]    `[start; text; extract]` |
| "entailment"      | pairs: (a [B], b [B]), [B, 2], {"text_a", "text_b"} | [B, S] `[start; a; delim; b; extract]` |
| "similarity"      | pairs, as entailment                            | [B, 2, S] both orders |
| "multiple_choice" | (context [B], choices [B, C]), [B, 1 + C], {"context", "choices"} | [B, C, S] `[start; context; delim; choice_c; extract]` |

Every text is cut to its first `max_text_length` BPE tokens (default: the budget that always
fits, `(S - 1 - parts) // parts` with parts 1 for "single" and 2 otherwise; for S = n_ctx and
two parts that is train.py's `transform_roc` cut `n_ctx // 2 - 2`), so the ids equal
`bert_tf.gpt.input_transforms` on the Python `TextEncoder`'s ids with `max_len` = that cut, and
the raw-text SavedModel export's (`bert_tf.export.gpt`). Padding is id 0 with mask 0.

**Text encoder.** `bert_tf.tokenization.gpt_bpe_in_graph.InGraphBpeEncoder` (the exports'):
exact `text_standardize`, spaCy's English tokenizer algorithm in TF ops, exact BPE. Its data
is stored in the layer's config: the vocabulary (token i has id i) and the merges (in rank
order), ftfy's per-character map and spaCy's English rules (read from the installed ftfy and
spaCy, the `[gpt]` extra, when the layer is first made; a loaded layer needs neither, except
ftfy's HTML entity table, read from ftfy when the encoder is built), and an optional chunk table
(`chunk_table`, from `build_chunk_table` over texts like the served ones). Documented
difference from the Python `TextEncoder` (docs/gpt_tokenization.md: 23 of 793,624 texts of
../shared/data, all of this kind): ftfy's mojibake repair (`CafÃ©`) is not reproduced.
"""
from __future__ import annotations

import atexit
import dataclasses
import json
import os
import shutil
import tempfile
from typing import Any, Mapping, Sequence

import keras
import numpy as np
import tensorflow as tf

from bert_tf.errors import UserInputError

__all__ = ["GptTextPreprocessor", "INPUT_TRANSFORMS", "GPT_TASKS", "text_budget",
           "transform_ids", "as_choice_array", "read_text_rules"]

# input_transform -> the GptClassifier task it feeds
GPT_TASKS = {"single": "classification", "entailment": "entailment",
             "similarity": "similarity", "multiple_choice": "multiple_choice"}
INPUT_TRANSFORMS = tuple(GPT_TASKS)
_TEXT_PARTS = {"single": 1, "entailment": 2, "similarity": 2, "multiple_choice": 2}
_BPE_DIRS: list[str] = []


def _remove_bpe_dirs() -> None:
    for path in _BPE_DIRS:
        shutil.rmtree(path, ignore_errors=True)


atexit.register(_remove_bpe_dirs)


def text_budget(sequence_length: int, input_transform: str) -> int:
    """The cut that always fits: (S - 1 - parts) // parts tokens per text (start, delimiters
    and extract take the rest)."""
    parts = _TEXT_PARTS[input_transform]
    return (int(sequence_length) - 1 - parts) // parts


def read_text_rules() -> dict:
    """{"char_map": ftfy's per-character map, "spacy_rules": spaCy's English rules (a dict of
    `SpacyEnglishRules`' fields)} from the installed ftfy and spaCy (the `[gpt]` extra)."""
    from bert_tf.tokenization.gpt_bpe_in_graph import ftfy_char_map
    from bert_tf.tokenization.gpt_spacy_in_graph import SpacyEnglishRules

    try:
        rules = SpacyEnglishRules.from_spacy()
        char_map = ftfy_char_map()
    except ImportError as e:
        raise UserInputError("GptTextPreprocessor reads ftfy's and spaCy's rules when it is first "
                             f"made: pip install 'bert_tf[gpt]' ({e})") from e
    return {"char_map": dict(char_map), "spacy_rules": dataclasses.asdict(rules)}


def _spacy_rules(fields: Mapping[str, Any]):
    from bert_tf.tokenization.gpt_spacy_in_graph import SpacyEnglishRules

    fields = dict(fields)
    fields["suffix_lookbehind"] = [tuple(x) for x in fields["suffix_lookbehind"]]
    fields["infix_chars"] = [tuple(x) for x in fields["infix_chars"]]
    return SpacyEnglishRules(**fields)


def transform_ids(first: tf.RaggedTensor, second: tf.RaggedTensor | None,
                  special_ids: Sequence[int], cut: int, width: int) -> dict[str, tf.Tensor]:
    """BPE ids int32 [N, (tokens)] of one or two text parts -> `[start; first; (delim;
    second;) extract]`, each part cut to its first `cut` tokens: {"token_ids": int32 [N, width]
    (0-padded), "mask": float32 [N, width]}. The caller ensures that the rows fit `width`."""
    start, delim, extract = (int(i) for i in special_ids)
    n = first.nrows(out_type=tf.int32)

    def const(value):
        return tf.RaggedTensor.from_tensor(tf.fill([n, 1], tf.constant(value, tf.int32)))

    pieces = [const(start), tf.cast(first, tf.int32)[:, :cut]]
    if second is not None:
        pieces += [const(delim), tf.cast(second, tf.int32)[:, :cut]]
    pieces.append(const(extract))
    rows = tf.concat(pieces, axis=1)
    return {"token_ids": rows.to_tensor(0, shape=[None, width]),
            "mask": tf.ones_like(rows, tf.float32).to_tensor(0.0, shape=[None, width])}


def as_choice_array(x: Any, what: str = "x") -> np.ndarray:
    """Multiple-choice rows in the shapes users pass -> an object array [N, 1 + C] (context,
    then the C choices). Accepted: a list of (context, [choices]) rows, a tuple (contexts,
    choices [N][C]), a dict {"context": [...], "choices": [[...], ...]}, an array [N, 1 + C]."""
    if isinstance(x, dict):
        if set(x) != {"context", "choices"}:
            raise UserInputError(f"{what}: a dict of multiple-choice rows needs exactly the keys "
                                 f"'context' and 'choices'; got {sorted(x)}")
        x = list(zip(x["context"], x["choices"]))
    elif isinstance(x, tuple) and len(x) == 2 and not isinstance(x[0], (str, bytes)):
        contexts, choices = list(x[0]), list(x[1])
        if len(contexts) != len(choices):
            raise UserInputError(f"{what}: {len(contexts)} contexts but {len(choices)} rows of "
                                 "choices")
        x = list(zip(contexts, choices))
    if isinstance(x, np.ndarray) and x.ndim == 2:
        rows = [list(r) for r in x]
    else:
        rows = []
        for i, row in enumerate(x):
            if (not isinstance(row, (tuple, list)) or len(row) != 2
                    or isinstance(row[1], (str, bytes))):
                raise UserInputError(f"{what}: row {i}: expected (context, [choice, ...]); got "
                                     f"{row!r:.80}")
            rows.append([row[0], *row[1]])
    widths = {len(r) for r in rows}
    if len(widths) > 1:
        first = len(rows[0]) - 1
        bad = next(i for i, r in enumerate(rows) if len(r) - 1 != first)
        raise UserInputError(f"{what}: row {bad} has {len(rows[bad]) - 1} choices, row 0 has "
                             f"{first}; every row needs the same number of choices")
    if rows and len(rows[0]) < 2:
        raise UserInputError(f"{what}: row 0 has no choices")
    for i, row in enumerate(rows):
        for value in row:
            if not isinstance(value, (str, bytes, np.str_, np.bytes_)):
                raise UserInputError(f"{what}: row {i}: {type(value).__name__} {value!r:.40}; "
                                     "expected strings")
    return np.asarray(rows, dtype=object).reshape(len(rows), -1)


@keras.saving.register_keras_serializable(package="bert_tf")
class GptTextPreprocessor(keras.layers.Layer):
    """Raw text -> GPT-1's transformed inputs (module docstring).

    Args:
      vocabulary: the BPE symbols in id order (symbol i has id i: `encoder_bpe_40000.json`'s
        keys sorted by id).
      merges: the BPE merges in rank order, each "first second" (`vocab_40000.bpe`'s lines).
      sequence_length: S, the length of every sequence (<= the model's n_ctx).
      input_transform: "single", "entailment", "similarity" or "multiple_choice".
      max_text_length: cut every text to its first N tokens; 0: the budget that always fits.
      special_ids: (start, delimiter, extract) ids; default: the ids after the vocabulary
        (n_vocab, n_vocab + 1, n_vocab + 2), as train.py.
      text_rules: `read_text_rules()`'s dict (ftfy's character map, spaCy's rules); None: read
        them now from the installed ftfy and spaCy.
      chunk_table: {chunk: [spaCy tokens]} overriding the in-graph spaCy rules (from
        `bert_tf.tokenization.gpt_bpe_in_graph.build_chunk_table`), or None.

    Attributes: `encoder` (the `InGraphBpeEncoder`, built on first use), `special_ids`,
    `cut` (the effective per-text cut), `vocab_size`.
    """

    def __init__(self, vocabulary: Sequence[str], merges: Sequence[str],
                 sequence_length: int = 128, input_transform: str = "single",
                 max_text_length: int = 0, special_ids: Sequence[int] | None = None,
                 text_rules: Mapping[str, Any] | None = None,
                 chunk_table: Mapping[str, Sequence[str]] | None = None, **kwargs):
        kwargs.setdefault("trainable", False)
        super().__init__(**kwargs)
        if input_transform not in GPT_TASKS:
            raise UserInputError(f"input_transform={input_transform!r}; expected one of "
                                 f"{', '.join(INPUT_TRANSFORMS)}")
        tokens = [str(t) for t in vocabulary]
        if len(set(tokens)) != len(tokens) or not tokens:
            raise UserInputError(f"GptTextPreprocessor: the vocabulary ({len(tokens)} symbols) "
                                 "is empty or repeats a symbol; expected the BPE encoder's "
                                 "symbols in id order")
        merge_lines = [str(m) for m in merges]
        bad = next((i for i, m in enumerate(merge_lines) if len(m.split()) != 2), None)
        if bad is not None:
            raise UserInputError(f"GptTextPreprocessor: merge {bad} is {merge_lines[bad]!r}; "
                                 "expected two symbols separated by a space")
        budget = text_budget(sequence_length, input_transform)
        if budget < 1:
            raise UserInputError(f"sequence_length={sequence_length} leaves no room for text "
                                 f"with the {input_transform} transformation")
        if not 0 <= int(max_text_length) <= budget:
            raise UserInputError(f"max_text_length={max_text_length}; expected 0 (the budget) "
                                 f"to {budget} ((sequence_length - 1 - parts) // parts for "
                                 f"{input_transform}, so that every sequence fits)")
        n = len(tokens)
        specials = [n, n + 1, n + 2] if special_ids is None else [int(i) for i in special_ids]
        if len(specials) != 3:
            raise UserInputError(f"special_ids={special_ids}; expected (start, delimiter, "
                                 "extract)")
        object.__setattr__(self, "vocabulary", tokens)  # untracked plain lists / dicts
        object.__setattr__(self, "merges", merge_lines)
        object.__setattr__(self, "special_ids", specials)
        object.__setattr__(self, "text_rules",
                           dict(read_text_rules() if text_rules is None else text_rules))
        object.__setattr__(self, "chunk_table",
                           None if chunk_table is None else
                           {str(k): [str(t) for t in v] for k, v in chunk_table.items()})
        self.sequence_length = int(sequence_length)
        self.input_transform = input_transform
        self.max_text_length = int(max_text_length)
        self.cut = self.max_text_length or budget
        self.vocab_size = n
        self.built = True
        object.__setattr__(self, "_encoder", None)
        object.__setattr__(self, "_traced", None)

    def get_config(self) -> dict:
        return {**super().get_config(), "vocabulary": list(self.vocabulary),
                "merges": list(self.merges), "sequence_length": self.sequence_length,
                "input_transform": self.input_transform,
                "max_text_length": self.max_text_length, "special_ids": list(self.special_ids),
                "text_rules": self.text_rules, "chunk_table": self.chunk_table}

    @property
    def encoder(self):
        """The `InGraphBpeEncoder` over this layer's data (built on first use)."""
        if self._encoder is None:
            from bert_tf.tokenization.gpt_bpe_in_graph import InGraphBpeEncoder

            folder = tempfile.mkdtemp(prefix="bert_tf_bpe_")
            _BPE_DIRS.append(folder)
            encoder_path = os.path.join(folder, "encoder.json")
            bpe_path = os.path.join(folder, "merges.bpe")
            with open(encoder_path, "w", encoding="utf-8") as f:
                json.dump({t: i for i, t in enumerate(self.vocabulary)}, f, ensure_ascii=False)
            with open(bpe_path, "w", encoding="utf-8", newline="\n") as f:
                f.write("#version: 0.2\n" + "".join(f"{m}\n" for m in self.merges))
            rules = self.text_rules
            with tf.init_scope():  # eager tables even when first used inside a graph
                encoder = InGraphBpeEncoder(
                    encoder_path, bpe_path, chunk_table=self.chunk_table,
                    char_map=rules.get("char_map", {}),
                    spacy_rules=_spacy_rules(rules["spacy_rules"]))
            object.__setattr__(self, "_encoder", encoder)
        return self._encoder

    def encode(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """tf.string [N] -> BPE ids int32 [N, (tokens)] (no special tokens, no cut)."""
        return tf.cast(self.encoder.encode(texts), tf.int32)

    def _sequences(self, first, second=None) -> dict[str, tf.Tensor]:
        return transform_ids(first, second, self.special_ids, self.cut, self.sequence_length)

    def split_inputs(self, inputs) -> tuple[tf.Tensor, tf.Tensor | None]:
        """(first texts [B], second [B] (pairs) or choices [B, C] (multiple choice) or None)."""
        t = self.input_transform
        if isinstance(inputs, dict):
            keys = ("context", "choices") if t == "multiple_choice" else ("text_a", "text_b")
            if set(inputs) != set(keys):
                raise UserInputError(f"GptTextPreprocessor({t}): a dict input needs the keys "
                                     f"{keys}; got {sorted(inputs)}")
            inputs = (inputs[keys[0]], inputs[keys[1]])
        if isinstance(inputs, (tuple, list)) and len(inputs) == 2 and not isinstance(
                inputs[0], (str, bytes)):
            first = tf.convert_to_tensor(inputs[0], tf.string)
            second = tf.convert_to_tensor(inputs[1], tf.string)
        else:
            texts = tf.convert_to_tensor(inputs, tf.string)
            if texts.shape.rank == 0:
                texts = texts[tf.newaxis]
            if texts.shape.rank == 1:
                first, second = texts, None
            elif texts.shape.rank == 2:
                first = texts[:, 0]
                second = texts[:, 1] if t in ("entailment", "similarity") else texts[:, 1:]
                if t in ("entailment", "similarity") and texts.shape[1] not in (None, 2):
                    raise UserInputError(f"GptTextPreprocessor({t}): pairs are [batch, 2]; got "
                                         f"shape {texts.shape}")
            else:
                raise UserInputError(f"GptTextPreprocessor({t}): expected tf.string [batch] or "
                                     f"[batch, n]; got shape {texts.shape}")
        if t == "single" and second is not None:
            raise UserInputError("GptTextPreprocessor(single): single texts [batch], not pairs "
                                 "(use input_transform='entailment' or 'similarity' for pairs)")
        if t != "single" and second is None:
            raise UserInputError(f"GptTextPreprocessor({t}): expected "
                                 + ("(context, choices)" if t == "multiple_choice"
                                    else "text pairs") + ", got single texts")
        if t == "multiple_choice" and second.shape.rank != 2:
            raise UserInputError("GptTextPreprocessor(multiple_choice): choices are [batch, C]")
        return first, second

    def call(self, inputs) -> dict[str, tf.Tensor]:
        """Texts (module docstring) -> {"token_ids": int32, "mask": float32}, [B, S], [B, 2, S]
        (similarity) or [B, C, S] (multiple choice)."""
        first, second = self.split_inputs(inputs)
        return self._transform(first, second)

    def _transform(self, first, second):
        t = self.input_transform
        if t == "single":
            return self._sequences(self.encode(first))
        if t == "entailment":
            return self._sequences(self.encode(first), self.encode(second))
        if t == "similarity":
            a, b = self.encode(first), self.encode(second)
            ab, ba = self._sequences(a, b), self._sequences(b, a)
            return {k: tf.stack([ab[k], ba[k]], axis=1) for k in ab}
        batch, num = tf.shape(second)[0], tf.shape(second)[1]
        # the contexts and the choices in one encoder call; each context repeated per choice
        ids = self.encode(tf.concat([first, tf.reshape(second, [-1])], axis=0))
        context_ids = tf.gather(ids[:batch], tf.range(batch * num) // num)
        flat = self._sequences(context_ids, ids[batch:])
        width = self.sequence_length
        return {k: tf.reshape(v, [batch, num, width]) for k, v in flat.items()}

    def pack(self, inputs) -> dict[str, tf.Tensor]:
        """`call` as one `tf.function` with a fixed input signature (traced once per process
        and reused by every `tf.data` pipeline: tracing the encoder costs seconds)."""
        first, second = self.split_inputs(inputs)
        if self._traced is None:
            text = tf.TensorSpec([None], tf.string)
            if self.input_transform == "single":
                fn = tf.function(lambda a: self._transform(a, None), input_signature=[text])
            else:
                shape = [None, None] if self.input_transform == "multiple_choice" else [None]
                fn = tf.function(self._transform,
                                 input_signature=[text, tf.TensorSpec(shape, tf.string)])
            object.__setattr__(self, "_traced", fn)
        if second is None:
            return self._traced(first)
        return self._traced(first, second)

    def output_shape_suffix(self, num_choices=None) -> list:
        t = self.input_transform
        lead = [] if t in ("single", "entailment") else [2 if t == "similarity" else num_choices]
        return [None, *lead, self.sequence_length]

    def compute_output_spec(self, inputs):
        shape = self.output_shape_suffix()
        return {"token_ids": keras.KerasTensor(shape, dtype="int32"),
                "mask": keras.KerasTensor(shape, dtype="float32")}
