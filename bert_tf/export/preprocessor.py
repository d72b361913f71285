"""Raw text -> packed BERT inputs, in-graph, exactly as the original's `convert_single_example`.

`BertPacker` packs WordPiece ids (ragged) into fixed-length `input_word_ids`, `input_mask`,
`input_type_ids` with core TF ops only; `BertPreprocessor` adds the `InGraphTokenizer` and is
exported as the preprocessing SavedModel, which follows the TF Hub BERT preprocessor API too:

  loaded(text: tf.string [batch])                             -> dict of int32 [batch, seq_length]
  loaded.tokenize(text: tf.string [batch])                    -> int32 RaggedTensor
                                                                 [batch, (words), (wordpieces)]
  loaded.bert_pack_inputs([segment, ...], seq_length=N)       -> dict of int32 [batch, N]
  signatures serving_default(text) / serving_pair(text_a, text_b) -> int32 [batch, seq_length] x 3

(dict keys `input_word_ids`, `input_mask`, `input_type_ids`; `hub.load`/`tf.saved_model.load` and
`hub.KerasLayer(path)`, `hub.KerasLayer(loaded.tokenize)`, `hub.KerasLayer(loaded.bert_pack_inputs,
arguments=dict(seq_length=N))` all work). `bert_pack_inputs` takes 1 to `MAX_PACKED_SEGMENTS`
segments, each [batch, (words), (wordpieces)] as `tokenize` returns or [batch, (wordpieces)], and
packs them as tensorflow-text's `combine_segments` does (`combine_segments` here, in fewer ops),
padded by its `pad_model_inputs`: [CLS] s1 [SEP] s2 [SEP] ..., type id = segment index, after
round-robin truncation to `seq_length` minus the specials (`round_robin_lengths`:
tensorflow-text's `RoundRobinTrimmer` semantics in closed form with core ops, since its
`RoundRobinTrim` kernel is not among the tensorflow-text ops older TF Serving builds have, see
serving_compat.py), which for one or two segments is exactly the original's truncation (keep the
first `seq_length - 2`; `_truncate_seq_pair`), so the ids equal `convert_single_example`'s.

Packing: [CLS] A [SEP] (B [SEP]), type ids 0 for [CLS]/A/first [SEP] and 1 for B/its [SEP], mask
1 on real tokens, zero padding. A single segment keeps its first `seq_length - 2` pieces; a pair is
cut to `seq_length - 3` pieces by the original's `_truncate_seq_pair` (pop from the longer one,
B on a tie), computed here in closed form.
"""
from __future__ import annotations

import os

import tensorflow as tf
import tensorflow_text as tf_text

from bert_tf.tokenization import InGraphTokenizer

INPUT_KEYS = ("input_word_ids", "input_mask", "input_type_ids")
# `bert_pack_inputs` of an exported preprocessor is traced for 1..MAX_PACKED_SEGMENTS segments.
MAX_PACKED_SEGMENTS = 8


def round_robin_lengths(lengths: tf.Tensor, budget: tf.Tensor) -> tf.Tensor:
    """Pieces each segment keeps under round-robin truncation (tensorflow-text's
    `RoundRobinTrimmer`): one piece at a time to each segment that has more, in segment order,
    until `budget` pieces are taken.

    In closed form: after k full rounds segment i holds min(l_i, k); k* is the largest k with
    sum_i min(l_i, k) <= budget, and the R = budget - sum_i min(l_i, k*) pieces left go to the
    first R segments longer than k*. For two segments this is the original's `_truncate_seq_pair`.

    Args:
      lengths: int64 [batch, num_segments] segment lengths.
      budget: int64 scalar (>= 0), the pieces all segments may keep together.

    Returns:
      int64 [batch, num_segments], the kept lengths.
    """
    lengths = tf.cast(lengths, tf.int64)
    budget = tf.cast(budget, tf.int64)
    longest = tf.reduce_max(tf.concat([tf.reshape(lengths, [-1]), [0]], axis=0))
    rounds = tf.range(longest + 1)  # [K]: 0..longest full rounds
    taken = tf.reduce_sum(tf.minimum(lengths[:, :, None], rounds[None, None, :]), axis=1)
    k = tf.reduce_sum(tf.cast(taken <= budget, tf.int64), axis=1) - 1  # [batch] (taken[0] = 0)
    base = tf.minimum(lengths, k[:, None])
    left = budget - tf.reduce_sum(base, axis=1)  # [batch]
    longer = tf.cast(lengths > k[:, None], tf.int64)
    extra = longer * tf.cast(tf.cumsum(longer, axis=1) <= left[:, None], tf.int64)
    return base + extra


def _keep_first(pieces: tf.RaggedTensor, lengths: tf.Tensor) -> tf.RaggedTensor:
    """[batch, (n)] -> the first `lengths[i]` values of each row (all of a shorter row).

    One gather of the kept values' positions: a few ops per segment in the traced graph, where
    `tf.ragged.boolean_mask` adds ~500 (an exported preprocessor traces this for every one of its
    1..MAX_PACKED_SEGMENTS segments, in 16 functions).
    """
    row_lengths = pieces.row_lengths()
    kept = tf.clip_by_value(tf.cast(lengths, row_lengths.dtype), 0, row_lengths)
    starts = pieces.row_starts()
    positions = tf.ragged.range(starts, starts + kept).flat_values
    return tf.RaggedTensor.from_row_lengths(tf.gather(pieces.values, positions), kept,
                                            validate=False)


def combine_segments(segments: list[tf.RaggedTensor], cls_value: int, sep_value: int
                     ) -> tuple[tf.RaggedTensor, tf.RaggedTensor]:
    """[CLS] s_0 [SEP] s_1 [SEP] ... with segment-index type ids, as tensorflow-text's
    `combine_segments`, for segments already trimmed.

    The same values in a few ops for any number of segments: the parts' values are laid out
    part after part, and one gather reads them row by row. tensorflow-text's ragged concat adds
    ~200 ops and row-partition checks per segment, which made tracing an exported preprocessor's
    16 `bert_pack_inputs` functions (twice: again when saving) most of its export time.

    Args:
      segments: int RaggedTensors [batch, (k_i)], all with the same batch size.
      cls_value, sep_value: the values put at [CLS] and after each segment.

    Returns:
      (values, type_ids): int32 RaggedTensors [batch, (1 + sum_i (k_i + 1))]; type id i for
      segment i and the [SEP] after it, 0 for [CLS].
    """
    batch = segments[0].nrows()
    ones = tf.ones([batch], batch.dtype)
    part_values = [tf.fill([batch], tf.constant(cls_value, tf.int32))]
    part_types = [tf.zeros([batch], tf.int32)]
    part_lengths = [ones]
    sep = tf.fill([batch], tf.constant(sep_value, tf.int32))
    for i, segment in enumerate(segments):
        part_values += [tf.cast(segment.values, tf.int32), sep]
        part_types += [tf.fill(tf.shape(segment.values), i), tf.fill([batch], i)]
        part_lengths += [tf.cast(segment.row_lengths(), batch.dtype), ones]
    num_parts = len(part_lengths)
    # Pool row p * batch + b holds part p of example b; read them example by example.
    pool_lengths = tf.concat(part_lengths, axis=0)
    pool_starts = tf.cumsum(pool_lengths, exclusive=True)
    by_example = tf.reshape(tf.transpose(tf.reshape(
        tf.range(tf.cast(num_parts, batch.dtype) * batch), [num_parts, -1])), [-1])
    starts = tf.gather(pool_starts, by_example)
    positions = tf.ragged.range(starts, starts + tf.gather(pool_lengths, by_example)).flat_values
    row_lengths = tf.add_n(part_lengths)

    def read(pool):
        return tf.RaggedTensor.from_row_lengths(tf.gather(tf.concat(pool, axis=0), positions),
                                                row_lengths, validate=False)

    return read(part_values), read(part_types)


def bert_pack_inputs(segments: list[tf.RaggedTensor], seq_length: int | tf.Tensor, cls_id: int,
                     sep_id: int) -> dict[str, tf.Tensor]:
    """TF Hub's `bert_pack_inputs`: any number of tokenized segments -> BERT inputs.

    Args:
      segments: int RaggedTensors, each [batch, (words), (wordpieces)] (as `tokenize` returns)
        or [batch, (wordpieces)]; all with the same batch size.
      seq_length: output length (Python int or int32 scalar tensor), >= len(segments) + 1.
      cls_id, sep_id: ids of [CLS] and [SEP]; padding is id 0.

    Returns:
      {"input_word_ids", "input_mask", "input_type_ids"}: int32 [batch, seq_length]. Round-robin
      truncation (`round_robin_lengths`); for one or two segments the original's truncation.
    """
    if not segments:
        raise ValueError("bert_pack_inputs needs at least one segment")
    flat = []
    for segment in segments:
        if isinstance(segment, tf.RaggedTensor) and segment.ragged_rank > 1:
            segment = segment.merge_dims(-2, -1)
        flat.append(tf.cast(segment, tf.int32))
    seq_length = tf.cast(seq_length, tf.int32)
    budget = seq_length - (len(flat) + 1)
    check = tf.debugging.assert_non_negative(
        budget, message=f"bert_pack_inputs: seq_length leaves no room for the {len(flat) + 1} "
        "[CLS]/[SEP] tokens of this many segments")
    with tf.control_dependencies([check]):
        budget = tf.identity(budget)
    keep = round_robin_lengths(tf.stack([x.row_lengths() for x in flat], axis=1), budget)
    ids, type_ids = combine_segments([_keep_first(x, keep[:, i]) for i, x in enumerate(flat)],
                                     cls_id, sep_id)
    word_ids, mask = tf_text.pad_model_inputs(ids, max_seq_length=seq_length)
    type_ids, _ = tf_text.pad_model_inputs(type_ids, max_seq_length=seq_length)
    return {"input_word_ids": tf.cast(word_ids, tf.int32), "input_mask": tf.cast(mask, tf.int32),
            "input_type_ids": tf.cast(type_ids, tf.int32)}


def truncated_pair_lengths(len_a: tf.Tensor, len_b: tf.Tensor, budget: int | tf.Tensor
                           ) -> tuple[tf.Tensor, tf.Tensor]:
    """Lengths left by the original's `_truncate_seq_pair` (longest first, B on a tie).

    The original pops one token at a time from the longer segment (from B when they are equal)
    until `len_a + len_b <= budget`. The result in closed form: nothing changes if the pair fits;
    if the shorter segment fits in half of the budget, only the longer one is cut (to
    `budget - shorter`); otherwise A keeps `ceil(budget / 2)` and B `floor(budget / 2)`.

    Args:
      len_a, len_b: integer tensors of the same shape (e.g. [batch]).
      budget: the most tokens both segments may keep together (`seq_length - 3`).

    Returns:
      (new_len_a, new_len_b), same shape and dtype as the inputs.
    """
    budget = tf.cast(budget, len_a.dtype)
    shorter = tf.minimum(len_a, len_b)
    fits = len_a + len_b <= budget
    only_longer_cut = 2 * shorter <= budget
    half_a = budget - budget // 2
    half_b = budget // 2
    a_is_longer = len_a > len_b
    new_a = tf.where(fits, len_a, tf.where(
        only_longer_cut, tf.where(a_is_longer, budget - shorter, len_a), half_a))
    new_b = tf.where(fits, len_b, tf.where(
        only_longer_cut, tf.where(a_is_longer, len_b, budget - shorter), half_b))
    return new_a, new_b


class BertPacker(tf.Module):
    """Packs ragged WordPiece ids into fixed-length BERT inputs (core TF ops only).

    Attributes:
      seq_length: output length (Python int).
      cls_id, sep_id: ids of [CLS] and [SEP]. Padding is id 0, as in the original (whatever the
        vocab's [PAD] id; it is 0 in every released BERT vocab).
    """

    def __init__(self, seq_length: int, cls_id: int, sep_id: int, name: str | None = None):
        super().__init__(name=name)
        if seq_length < 3:
            raise ValueError(f"seq_length must be >= 3 ([CLS] A [SEP] B [SEP] needs 3 specials), "
                             f"got {seq_length}")
        self.seq_length = int(seq_length)
        self.cls_id = int(cls_id)
        self.sep_id = int(sep_id)

    def pair_lengths(self, pieces_a: tf.RaggedTensor, pieces_b: tf.RaggedTensor | None
                     ) -> tuple[tf.Tensor, tf.Tensor | None]:
        """How many pieces of each segment `pack` keeps (int64 [batch] each; None without B)."""
        len_a = pieces_a.row_lengths()
        if pieces_b is None:
            return tf.minimum(len_a, self.seq_length - 2), None
        return truncated_pair_lengths(len_a, pieces_b.row_lengths(), self.seq_length - 3)

    def pack(self, pieces_a: tf.RaggedTensor, pieces_b: tf.RaggedTensor | None = None,
             keep_a: tf.Tensor | None = None, keep_b: tf.Tensor | None = None
             ) -> dict[str, tf.Tensor]:
        """Packs one or two segments.

        Args:
          pieces_a: int RaggedTensor [batch, (pieces)] of the first segment.
          pieces_b: int RaggedTensor [batch, (pieces)] of the second segment, or None.
          keep_a, keep_b: int64 [batch], pieces to keep per segment; default: the original's
            truncation (`pair_lengths`). Given explicitly they must fit in `seq_length`.

        Returns:
          {"input_word_ids", "input_mask", "input_type_ids"}: int32 [batch, seq_length].
        """
        if keep_a is None:
            keep_a, keep_b = self.pair_lengths(pieces_a, pieces_b)
        ids, type_ids = self._concat(pieces_a, pieces_b, keep_a, keep_b, self.cls_id, self.sep_id)
        return {
            "input_word_ids": self._dense(ids),
            "input_mask": self._dense(tf.ones_like(ids)),
            "input_type_ids": self._dense(type_ids),
        }

    def pack_values(self, values_a: tf.RaggedTensor, values_b: tf.RaggedTensor | None,
                    keep_a: tf.Tensor, keep_b: tf.Tensor | None, special_value: int = 0
                    ) -> tf.Tensor:
        """Packs per-piece values (e.g. word-start flags) into the same layout as `pack`.

        Returns:
          int32 [batch, seq_length], `special_value` at [CLS]/[SEP], 0 in the padding.
        """
        values, _ = self._concat(values_a, values_b, keep_a, keep_b, special_value,
                                 special_value)
        return self._dense(values)

    def _dense(self, ragged: tf.RaggedTensor) -> tf.Tensor:
        return ragged.to_tensor(0, shape=[None, self.seq_length])

    def _concat(self, pieces_a, pieces_b, keep_a, keep_b, cls_value, sep_value):
        segments = [_keep_first(pieces_a, keep_a)]
        if pieces_b is not None:
            segments.append(_keep_first(pieces_b, keep_b))
        return combine_segments(segments, cls_value, sep_value)


def ensure_input_shape(value: tf.Tensor, shape: list[int | None]) -> tf.Tensor:
    """Run-time check that a signature input has `shape` (None = any size); returns it.

    Signature placeholders carry their shape, but a session does not enforce it: a feed of the
    wrong rank would otherwise fail deep inside the graph (or, for some ops, be misread). The
    raw `EnsureShape` op stays in the graph and fails with "Shape of tensor <input> [...] is not
    compatible with expected shape [...]", naming the signature input.
    """
    return tf.raw_ops.EnsureShape(input=value, shape=shape)


def with_same_batch_size(first: tf.Tensor, second: tf.Tensor, first_name: str,
                         second_name: str) -> tf.Tensor:
    """`second` behind a run-time check that it has as many rows as `first` (dimension 0).

    Two signature inputs of one request ([batch, ...] each) must agree on the batch size, else
    the call fails with "inputs '<first_name>' and '<second_name>' must have the same batch
    size" before anything reads `second`.
    """
    same = tf.debugging.assert_equal(
        tf.shape(first)[0], tf.shape(second)[0],
        message=f"inputs '{first_name}' and '{second_name}' must have the same batch size")
    with tf.control_dependencies([same]):
        return tf.identity(second)


class BertPreprocessor(tf.Module):
    """The preprocessing SavedModel: raw strings -> packed `input_word_ids`/`input_mask`/
    `input_type_ids` (int32 [batch, seq_length]); ids equal `FullTokenizer` + `convert_single_example`
    (see docs/tokenization.md for the documented in-graph differences).

    Attributes:
      tokenizer: the `InGraphTokenizer` (its vocab file is an asset of the SavedModel).
      packer: the `BertPacker`.
      seq_length, do_lower_case: as given.
    """

    def __init__(self, vocab_file: str | os.PathLike, seq_length: int, do_lower_case: bool = True,
                 name: str | None = None):
        """Args:
          vocab_file: WordPiece vocab (validated by `load_vocab`); must contain [CLS] and [SEP].
          seq_length: length of every output row (>= 3).
          do_lower_case: as `FullTokenizer(do_lower_case=...)`.
        """
        super().__init__(name=name)
        # Classic tensorflow-text ops only (serving_compat); mode="fast" gives the same ids.
        self.tokenizer = InGraphTokenizer(vocab_file, do_lower_case=do_lower_case, mode="exact")
        if self.tokenizer.cls_id is None or self.tokenizer.sep_id is None:
            raise ValueError(f"{os.fspath(vocab_file)}: the vocab needs [CLS] and [SEP] tokens to "
                             "pack BERT inputs")
        self.packer = BertPacker(seq_length, self.tokenizer.cls_id, self.tokenizer.sep_id)
        self.seq_length = int(seq_length)
        self.do_lower_case = bool(do_lower_case)
        self.seq_length_value = tf.Variable(self.seq_length, trainable=False, name="seq_length")
        self.do_lower_case_value = tf.Variable(self.do_lower_case, trainable=False,
                                               name="do_lower_case")

    def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """tf.string [batch] -> int32 RaggedTensor [batch, (pieces)]."""
        return self.tokenizer.tokenize(texts)

    def pack_single(self, text: tf.Tensor) -> dict[str, tf.Tensor]:
        """tf.string [batch] -> {input_word_ids, input_mask, input_type_ids}: int32 [batch, S]."""
        text = ensure_input_shape(text, [None])
        return self.packer.pack(self.tokenize(text))

    def pack_pair(self, text_a: tf.Tensor, text_b: tf.Tensor) -> dict[str, tf.Tensor]:
        """Two tf.string [batch] -> {input_word_ids, input_mask, input_type_ids}: int32 [batch, S].

        Both inputs must have the same batch size (checked at run time).
        """
        text_a = ensure_input_shape(text_a, [None])
        text_b = with_same_batch_size(text_a, ensure_input_shape(text_b, [None]), "text_a",
                                      "text_b")
        return self.packer.pack(self.tokenize(text_a), self.tokenize(text_b))

    def tokenize_words(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """TF Hub's `tokenize`: tf.string [batch] -> int32 RaggedTensor [batch, (words),
        (wordpieces)] (the words of the original's BasicTokenizer, each split by WordPiece)."""
        return self.tokenizer.tokenize_words(ensure_input_shape(texts, [None]))

    def bert_pack_inputs(self, segments: list[tf.RaggedTensor], seq_length: int | tf.Tensor | None
                         = None) -> dict[str, tf.Tensor]:
        """TF Hub's `bert_pack_inputs` with this vocab's [CLS]/[SEP] (see the module function);
        `seq_length` defaults to this preprocessor's."""
        return bert_pack_inputs(list(segments), self.seq_length if seq_length is None
                                else seq_length, self.packer.cls_id, self.packer.sep_id)

    def serving_signatures(self) -> dict[str, tf.types.experimental.ConcreteFunction]:
        """{"serving_default": text -> inputs, "serving_pair": (text_a, text_b) -> inputs}."""
        text = tf.TensorSpec([None], tf.string, name="text")
        single = tf.function(lambda text: self.pack_single(text), jit_compile=False)
        pair = tf.function(lambda text_a, text_b: self.pack_pair(text_a, text_b),
                           jit_compile=False)
        return {
            "serving_default": single.get_concrete_function(text),
            "serving_pair": pair.get_concrete_function(
                tf.TensorSpec([None], tf.string, name="text_a"),
                tf.TensorSpec([None], tf.string, name="text_b")),
        }


class HubPreprocessorExport(tf.Module):
    """What the preprocessing SavedModel holds: the TF Hub BERT preprocessor API over a
    `BertPreprocessor`, plus its `serving_default`/`serving_pair` signatures.

    Saved functions (see the module docstring): `__call__(text)`, `tokenize(text)`,
    `bert_pack_inputs(segments, seq_length)` (traced for 1..MAX_PACKED_SEGMENTS segments, each of
    rank 3 as `tokenize` returns or rank 2, and an int32 scalar `seq_length`). Attributes
    `vocab_file` (asset), `do_lower_case` and `seq_length` (variables) tell a loader which
    tokenizer the module uses (as the original's hub modules' `tokenization_info`).
    """

    def __init__(self, preprocessor: BertPreprocessor, name: str | None = None):
        super().__init__(name=name)
        self.preprocessor = preprocessor
        self.vocab_file = preprocessor.tokenizer.vocab_file
        self.do_lower_case = preprocessor.do_lower_case_value
        self.seq_length = preprocessor.seq_length_value
        for n in range(1, MAX_PACKED_SEGMENTS + 1):
            for rank in (3, 2):
                spec = tf.RaggedTensorSpec([None] * rank, tf.int32, ragged_rank=rank - 1)
                self.bert_pack_inputs.get_concrete_function(
                    [spec] * n, tf.TensorSpec([], tf.int32, name="seq_length"))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")],
                 jit_compile=False)
    def __call__(self, text: tf.Tensor) -> dict[str, tf.Tensor]:
        """tf.string [batch] -> {input_word_ids, input_mask, input_type_ids}: int32 [batch, S]
        (S = the export's seq_length), the same as serving_default."""
        return self.preprocessor.bert_pack_inputs([self.preprocessor.tokenize_words(text)])

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")],
                 jit_compile=False)
    def tokenize(self, text: tf.Tensor) -> tf.RaggedTensor:
        """tf.string [batch] -> int32 RaggedTensor [batch, (words), (wordpieces)]."""
        return self.preprocessor.tokenize_words(text)

    @tf.function(jit_compile=False)
    def bert_pack_inputs(self, inputs: list[tf.RaggedTensor], seq_length: tf.Tensor
                         ) -> dict[str, tf.Tensor]:
        """[segment, ...] (each [batch, (words), (wordpieces)] or [batch, (wordpieces)]) and an
        int32 scalar -> {input_word_ids, input_mask, input_type_ids}: int32 [batch, seq_length]."""
        return self.preprocessor.bert_pack_inputs(inputs, seq_length)

    def serving_signatures(self) -> dict[str, tf.types.experimental.ConcreteFunction]:
        """The preprocessor's {"serving_default", "serving_pair"} signatures."""
        return self.preprocessor.serving_signatures()
