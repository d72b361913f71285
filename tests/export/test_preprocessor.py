"""Preprocessing SavedModel: ids, mask and type ids equal FullTokenizer + the original packing
(longest-first pair truncation) on the fixture vocab, on the original's tricky strings and on real
sentences; truncation in closed form equals the original's pop loop; the exported signatures."""
from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.export.preprocessor import (BertPreprocessor, truncated_pair_lengths,
                                         with_same_batch_size)
from bert_tf.tokenization.packing import pack_tokens, truncate_seq_pair
from bert_tf.tokenization import FullTokenizer

from serving_setup import SEQ_LENGTH


def test_truncated_pair_lengths_equals_original_loop():
    lengths = np.arange(0, 23)
    la, lb = [x.reshape(-1) for x in np.meshgrid(lengths, lengths)]
    for budget in (0, 1, 2, 5, 8, 13):
        got_a, got_b = truncated_pair_lengths(tf.constant(la), tf.constant(lb), budget)
        for i in range(len(la)):
            a, b = list(range(la[i])), list(range(lb[i]))
            truncate_seq_pair(a, b, budget)
            assert (got_a[i], got_b[i]) == (len(a), len(b)), (la[i], lb[i], budget)


def test_with_same_batch_size_names_both_inputs():
    """Two inputs of one request: `second` passes when dimension 0 agrees, else a clear error."""
    check = tf.function(lambda a, b: with_same_batch_size(a, b, "context", "choices"))
    choices = tf.constant([["x", "y"], ["z", "w"]])
    assert check(tf.constant(["a", "b"]), choices).numpy().tolist() == choices.numpy().tolist()
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"context.* and .*choices.* must have the same batch size"):
        check(tf.constant(["a"]), choices)

def _real_sentences(original_fixtures) -> list[str]:
    lines = (original_fixtures / "sample_text.txt").read_text(encoding="utf-8").splitlines()
    sentences = [line for line in lines if line.strip()]
    with open(original_fixtures / "tokenization" / "uncased_vocab_lower_true.jsonl",
              encoding="utf-8") as f:
        tricky = [json.loads(line)["text"] for line in f if line.strip()]
    return sentences + [t for t in tricky if isinstance(t, str)] + ["", "   ", "x" * 10_000]


def _expected(tokenizer: FullTokenizer, a: str, b: str | None, seq_length: int):
    packed = pack_tokens(tokenizer.tokenize(a), tokenizer.tokenize(b) if b is not None else None,
                         seq_length, tokenizer.vocab)
    return packed.input_ids, packed.input_mask, packed.segment_ids


@pytest.mark.long
@pytest.mark.parametrize("seq_length", [SEQ_LENGTH, 64])
def test_matches_full_tokenizer_and_original_packing(original_fixtures, fixture_model,
                                                     seq_length):
    texts = _real_sentences(original_fixtures)
    pre = BertPreprocessor(fixture_model["vocab_file"], seq_length, do_lower_case=True)
    tokenizer = FullTokenizer(fixture_model["vocab_file"], do_lower_case=True)
    single = pre.pack_single(tf.constant(texts))
    # Pairs: each text with the next (different lengths on both sides, ties included).
    texts_b = texts[1:] + texts[:1]
    pair = pre.pack_pair(tf.constant(texts), tf.constant(texts_b))
    for i, (a, b) in enumerate(zip(texts, texts_b)):
        ids, mask, types = _expected(tokenizer, a, None, seq_length)
        assert single["input_word_ids"][i].numpy().tolist() == ids, a
        assert single["input_mask"][i].numpy().tolist() == mask
        assert single["input_type_ids"][i].numpy().tolist() == types
        ids, mask, types = _expected(tokenizer, a, b, seq_length)
        assert pair["input_word_ids"][i].numpy().tolist() == ids, (a, b)
        assert pair["input_mask"][i].numpy().tolist() == mask
        assert pair["input_type_ids"][i].numpy().tolist() == types
    for out in (single, pair):
        assert all(v.dtype == tf.int32 and v.shape == (len(texts), seq_length)
                   for v in out.values())


@pytest.mark.long
def test_exported_signatures(exports, fixture_model):
    import tensorflow_text  # noqa: F401  (registers the ops the SavedModel uses)

    loaded = tf.saved_model.load(str(exports["preprocessor"]))
    assert set(loaded.signatures) == {"serving_default", "serving_pair"}
    tokenizer = FullTokenizer(fixture_model["vocab_file"], do_lower_case=True)
    texts = ["The quick brown fox jumps over the lazy dog.", "unaffable", ""]
    out = loaded.signatures["serving_default"](text=tf.constant(texts))
    for i, text in enumerate(texts):
        assert out["input_word_ids"][i].numpy().tolist() == _expected(
            tokenizer, text, None, SEQ_LENGTH)[0]
    out = loaded.signatures["serving_pair"](text_a=tf.constant(texts),
                                            text_b=tf.constant(texts[::-1]))
    for i, (a, b) in enumerate(zip(texts, texts[::-1])):
        assert out["input_word_ids"][i].numpy().tolist() == _expected(tokenizer, a, b,
                                                                      SEQ_LENGTH)[0]
        assert out["input_type_ids"][i].numpy().tolist() == _expected(tokenizer, a, b,
                                                                      SEQ_LENGTH)[2]
    assert (exports["preprocessor"] / "assets" / "vocab_uncased.txt").exists()
    # An empty batch gives empty outputs of the right shape.
    empty = loaded.signatures["serving_default"](text=tf.constant([], tf.string))
    assert empty["input_word_ids"].shape == (0, SEQ_LENGTH)


def test_rejects_bad_configuration(fixture_model, tmp_path):
    with pytest.raises(ValueError, match="seq_length must be >= 3"):
        BertPreprocessor(fixture_model["vocab_file"], 2)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\nhello\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"needs \[CLS\] and \[SEP\]"):
        BertPreprocessor(str(vocab), 8)


def test_real_sentence_pairs_mrpc(shared_data, fixture_model):
    """MRPC dev pairs (real sentences; seq_length 32 truncates most pairs, both sides)."""
    path = shared_data / "glue" / "MRPC" / "dev.tsv"
    if not path.exists():
        pytest.skip(f"needs {path}")
    rows = [line.rstrip("\n").split("\t") for line in path.read_text(encoding="utf-8")
            .splitlines()[1:301]]
    a, b = [r[3] for r in rows], [r[4] for r in rows]
    pre = BertPreprocessor(fixture_model["vocab_file"], 32, do_lower_case=True)
    tokenizer = FullTokenizer(fixture_model["vocab_file"], do_lower_case=True)
    out = pre.pack_pair(tf.constant(a), tf.constant(b))
    for i in range(len(rows)):
        ids, mask, types = _expected(tokenizer, a[i], b[i], 32)
        assert out["input_word_ids"][i].numpy().tolist() == ids, (a[i], b[i])
        assert out["input_mask"][i].numpy().tolist() == mask
        assert out["input_type_ids"][i].numpy().tolist() == types


# ---------------------------------------------------------------------------------------------
# TF Hub BERT preprocessor API: callable, tokenize, bert_pack_inputs
# ---------------------------------------------------------------------------------------------
@pytest.mark.long
def test_round_robin_packing_equals_original_truncation_for_pairs():
    """bert_pack_inputs uses tensorflow-text's RoundRobinTrimmer; for two segments it keeps the
    same pieces as the original's _truncate_seq_pair (pop from the longer, B on a tie)."""
    import tensorflow_text as tf_text

    lengths = np.arange(0, 23)
    la, lb = [x.reshape(-1) for x in np.meshgrid(lengths, lengths)]
    a, b = tf.ragged.range(la), tf.ragged.range(lb)
    for budget in (0, 1, 2, 5, 8, 13):
        got_a, got_b = tf_text.RoundRobinTrimmer(max_seq_length=budget).trim([a, b])
        for i in range(len(la)):
            x, y = list(range(la[i])), list(range(lb[i]))
            truncate_seq_pair(x, y, budget)
            assert (len(got_a[i]), len(got_b[i])) == (len(x), len(y)), (la[i], lb[i], budget)


@pytest.mark.long
def test_round_robin_lengths_equal_tensorflow_text_trimmer():
    """The closed form used in the export (core ops, servable) equals tensorflow-text's
    RoundRobinTrimmer for 1 to 4 segments."""
    import itertools

    import tensorflow_text as tf_text

    from bert_tf.export.preprocessor import round_robin_lengths

    for n in (1, 2, 3, 4):
        combos = np.array(list(itertools.product(range(0, 7), repeat=n)))
        segments = [tf.ragged.range(combos[:, i]) for i in range(n)]
        for budget in (0, 1, 2, 5, 9, 13, 30):
            want = tf_text.RoundRobinTrimmer(max_seq_length=budget).trim(segments)
            want = np.stack([w.row_lengths().numpy() for w in want], axis=1)
            got = round_robin_lengths(tf.constant(combos, tf.int64), tf.constant(budget, tf.int64))
            np.testing.assert_array_equal(got.numpy(), want, err_msg=f"n={n} budget={budget}")


def test_packing_equals_tensorflow_text_trimmer_combine_and_pad():
    """`bert_pack_inputs` (its own gather-based trim and `combine_segments`, few ops) gives what
    tensorflow-text's RoundRobinTrimmer + combine_segments + pad_model_inputs give, traced, for
    1-3 segments of both ranks: empty rows, rows longer than the budget, an empty batch."""
    import tensorflow_text as tf_text

    from bert_tf.export.preprocessor import bert_pack_inputs

    def reference(segments, seq_length):
        flat = [s.merge_dims(-2, -1) if s.ragged_rank > 1 else s for s in segments]
        trimmed = tf_text.RoundRobinTrimmer(max_seq_length=seq_length - len(flat) - 1).trim(flat)
        ids, types = tf_text.combine_segments(trimmed, start_of_sequence_id=101,
                                              end_of_segment_id=102)
        word_ids, mask = tf_text.pad_model_inputs(ids, max_seq_length=seq_length)
        type_ids, _ = tf_text.pad_model_inputs(types, max_seq_length=seq_length)
        return word_ids, mask, type_ids

    def words(rng, batch):  # [batch, (words), (wordpieces)], 0-5 words of 1-3 pieces
        words_per_row = rng.integers(0, 6, batch)
        pieces_per_word = rng.integers(1, 4, words_per_row.sum())
        values = rng.integers(1000, 2000, pieces_per_word.sum()).astype(np.int32)
        return tf.RaggedTensor.from_nested_row_lengths(values, [words_per_row, pieces_per_word])

    ours = tf.function(lambda segments, n: bert_pack_inputs(segments, n, 101, 102))
    rng = np.random.default_rng(7)
    for n in (1, 2, 3):
        for batch in (0, 1, 9):
            segments = [words(rng, batch) for _ in range(n)]
            segments[1::2] = [x.merge_dims(-2, -1) for x in segments[1::2]]  # rank 2 too
            for seq_length in (n + 1, n + 3, 12, 40):
                got = ours(segments, tf.constant(seq_length))
                want = reference(segments, seq_length)
                for key, value in zip(("input_word_ids", "input_mask", "input_type_ids"), want):
                    np.testing.assert_array_equal(got[key].numpy(), value.numpy(),
                                                  err_msg=f"{key} n={n} batch={batch} "
                                                  f"seq_length={seq_length}")


def _check_hub_api(pre, tokenizer, texts, texts_b):
    """`pre` has the TF Hub preprocessor API (a loaded SavedModel or the export module)."""
    out = pre(tf.constant(texts))
    for i, text in enumerate(texts):
        ids, mask, types = _expected(tokenizer, text, None, SEQ_LENGTH)
        assert out["input_word_ids"][i].numpy().tolist() == ids, text
        assert out["input_mask"][i].numpy().tolist() == mask
        assert out["input_type_ids"][i].numpy().tolist() == types
    tokens = pre.tokenize(tf.constant(texts))
    assert isinstance(tokens, tf.RaggedTensor) and tokens.shape.rank == 3  # [batch, words, pieces]
    for i, text in enumerate(texts):
        words = tokenizer.basic_tokenizer.tokenize(text)
        assert tokens[i].to_list() == [
            tokenizer.convert_tokens_to_ids(tokenizer.wordpiece_tokenizer.tokenize(w))
            for w in words], text
    tokens_b = pre.tokenize(tf.constant(texts_b))
    for seq_length in (SEQ_LENGTH, 9, 40):
        pair = pre.bert_pack_inputs([tokens, tokens_b], seq_length=seq_length)
        for i, (a, b) in enumerate(zip(texts, texts_b)):
            ids, mask, types = _expected(tokenizer, a, b, seq_length)
            assert pair["input_word_ids"][i].numpy().tolist() == ids, (a, b, seq_length)
            assert pair["input_mask"][i].numpy().tolist() == mask
            assert pair["input_type_ids"][i].numpy().tolist() == types
    # Three segments: [CLS] a [SEP] b [SEP] c [SEP], type ids 0/1/2, round robin within 20.
    three = pre.bert_pack_inputs([tokens, tokens_b, tokens], seq_length=20)
    assert three["input_word_ids"].shape == (len(texts), 20)
    for i in range(len(texts)):
        ids = three["input_word_ids"][i].numpy().tolist()
        types = three["input_type_ids"][i].numpy().tolist()
        n = sum(three["input_mask"][i].numpy().tolist())
        assert ids[0] == tokenizer.vocab["[CLS]"] and ids[n - 1] == tokenizer.vocab["[SEP]"]
        assert ids.count(tokenizer.vocab["[SEP]"]) == 3 and all(x == 0 for x in ids[n:])
        assert sorted(set(types[:n])) == [0, 1, 2] and types[n:] == [0] * (20 - n)


@pytest.mark.slow  # ~20-30 s: keeps the default suite under 15 min
def test_hub_api_in_python(fixture_model):
    from bert_tf.export.preprocessor import HubPreprocessorExport

    tokenizer = FullTokenizer(fixture_model["vocab_file"], do_lower_case=True)
    texts = ["The quick brown fox jumps over the lazy dog.", "unaffable", "Hello, World!"]
    module = HubPreprocessorExport(BertPreprocessor(fixture_model["vocab_file"], SEQ_LENGTH))
    _check_hub_api(module, tokenizer, texts, texts[::-1])


@pytest.mark.slow  # three loads of the export (tf.saved_model, hub.load, hub.KerasLayer): ~36 s
def test_exported_hub_api_with_saved_model_load_and_hub_keras_layer(exports, fixture_model):
    import tensorflow_text  # noqa: F401  (registers the ops the SavedModel uses)

    hub = pytest.importorskip("tensorflow_hub", reason="the [test] extra installs tensorflow-hub")
    path = str(exports["preprocessor"])
    tokenizer = FullTokenizer(fixture_model["vocab_file"], do_lower_case=True)
    texts = ["The quick brown fox jumps over the lazy dog.", "unaffable", "",
             "Who was Jim Henson? Jim Henson was a puppeteer."]
    loaded = tf.saved_model.load(path)
    _check_hub_api(loaded, tokenizer, texts, texts[::-1])
    assert loaded.vocab_file.asset_path.numpy().decode().endswith("vocab_uncased.txt")
    assert bool(loaded.do_lower_case.numpy()) and int(loaded.seq_length.numpy()) == SEQ_LENGTH

    hub_loaded = hub.load(path)
    _check_hub_api(hub_loaded, tokenizer, texts, texts[::-1])
    # The TF Hub documentation's usage: KerasLayer on the module, on tokenize, on bert_pack_inputs.
    layer_out = hub.KerasLayer(path)(tf.constant(texts))
    direct = loaded(tf.constant(texts))
    for key in ("input_word_ids", "input_mask", "input_type_ids"):
        assert layer_out[key].numpy().tolist() == direct[key].numpy().tolist()
    tokenize = hub.KerasLayer(hub_loaded.tokenize)
    pack = hub.KerasLayer(hub_loaded.bert_pack_inputs, arguments=dict(seq_length=24))
    packed = pack([tokenize(tf.constant(texts)), tokenize(tf.constant(texts[::-1]))])
    for i, (a, b) in enumerate(zip(texts, texts[::-1])):
        assert packed["input_word_ids"][i].numpy().tolist() == _expected(tokenizer, a, b, 24)[0]
