"""`bert_tf.from_pretrained`: Google's release layout (the original release's fixture checkpoint),
a Hugging Face folder (all-MiniLM-L6-v2, real pretrained weights), bert_tf's `.keras` file and
encoder SavedModel, and preset names; a model and its tokenizer together, clear one-line errors."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import bert_tf
from bert_tf.checkpoints import read_checkpoint, read_huggingface_weights, variable_map
from bert_tf.errors import UserInputError
from bert_tf.modeling import (BertClassifier, BertConfig, BertEncoder, BertPretrainer,
                              ConfigError)
from bert_tf.presets import list_presets, lower_case_of_name, preset_config
from bert_tf.pretrained import PretrainedBert


@pytest.fixture(scope="module")
def release_dir(original_fixtures):
    """Google's layout: bert_config.json + bert_model.ckpt* (the original release's code wrote
    this checkpoint); the fixture keeps its vocab one folder up."""
    return original_fixtures / "checkpoint"


@pytest.fixture(scope="module")
def vocab(original_fixtures):
    return original_fixtures / "vocab_uncased.txt"


def _ids(tokenizer, text: str, seq: int = 16) -> dict[str, np.ndarray]:
    tokens = ["[CLS]"] + tokenizer.tokenize(text)[: seq - 2] + ["[SEP]"]
    ids = tokenizer.convert_tokens_to_ids(tokens)
    word = np.zeros([1, seq], np.int32)
    word[0, : len(ids)] = ids
    mask = (word > 0).astype(np.int32)
    return {"input_word_ids": word, "input_mask": mask, "input_type_ids": np.zeros_like(word)}


def _assert_weights_are(model, tensors: dict[str, np.ndarray], prefix: str = "") -> None:
    names = [n for n in variable_map(model) if n.startswith(prefix)]
    assert names
    for name in names:
        np.testing.assert_array_equal(np.asarray(variable_map(model)[name]), tensors[name],
                                      err_msg=name)


@pytest.mark.long
def test_google_release_layout(release_dir, vocab, original_fixtures):
    model, tokenizer = bert_tf.from_pretrained(release_dir, vocab_file=vocab)
    assert isinstance(model, BertEncoder) and model.config.hidden_size == 128
    _assert_weights_are(model, read_checkpoint(release_dir / "bert_model.ckpt"))
    assert tokenizer.tokenize("Hello, World!") == ["hello", ",", "world", "!"]  # uncased
    # The original release's own forward pass on its fixture inputs (README tolerance 1e-5).
    inputs = json.loads((release_dir / "inputs.json").read_text())
    ref = np.load(release_dir / "reference_outputs.npz")
    out = model({"input_ids": tf.constant(inputs["input_ids"]),
                 "input_mask": tf.constant(inputs["input_mask"]),
                 "segment_ids": tf.constant(inputs["segment_ids"])}, training=False)
    np.testing.assert_allclose(out["pooled_output"], ref["pooled_output"], atol=1e-5, rtol=0)


def test_google_layout_with_heads_and_vocab_in_the_folder(release_dir, vocab, tmp_path):
    folder = tmp_path / "uncased_L-2_H-128_A-2"
    folder.mkdir()
    for f in release_dir.iterdir():
        if f.name.startswith(("bert_model.ckpt", "bert_config.json")):
            os.symlink(f, folder / f.name)
    os.symlink(vocab, folder / "vocab.txt")
    model, tokenizer = bert_tf.from_pretrained(folder, BertPretrainer)
    assert isinstance(model, BertPretrainer)
    _assert_weights_are(model, read_checkpoint(release_dir / "bert_model.ckpt"), "cls/")
    assert tokenizer.basic_tokenizer.do_lower_case
    classifier, _ = bert_tf.from_pretrained(folder, lambda c: BertClassifier(c, num_labels=3))
    assert classifier(_ids(tokenizer, "a test"))["logits"].shape == (1, 3)


def test_missing_vocab_is_one_clear_line(release_dir):
    with pytest.raises(UserInputError) as e:
        bert_tf.from_pretrained(release_dir)
    message = str(e.value)
    assert "\n" not in message and "vocab.txt" in message and "vocab_file=" in message
    assert "with_tokenizer=False" in message
    model, tokenizer = bert_tf.from_pretrained(release_dir, with_tokenizer=False)
    assert tokenizer is None and model.built


def test_huggingface_folder(minilm_model_dir):
    result = bert_tf.from_pretrained(minilm_model_dir)
    assert isinstance(result, PretrainedBert)
    model, tokenizer = result
    assert (model.config.num_hidden_layers, model.config.hidden_size) == (6, 384)
    assert model.config.hidden_act == "gelu_exact"
    _assert_weights_are(model, read_huggingface_weights(os.path.join(minilm_model_dir,
                                                                     "model.safetensors")))
    hf_lower = json.load(open(os.path.join(minilm_model_dir, "tokenizer_config.json"))).get(
        "do_lower_case", True)
    assert tokenizer.basic_tokenizer.do_lower_case == hf_lower
    inputs = _ids(tokenizer, "The quick brown fox jumps over the lazy dog.")
    pooled = model(inputs, training=False)["pooled_output"]
    assert np.all(np.isfinite(pooled))


def test_huggingface_folder_equals_converted_checkpoint(minilm_model_dir, tmp_path):
    from bert_tf.checkpoints import convert_huggingface_to_original

    convert_huggingface_to_original(minilm_model_dir, str(tmp_path / "bert_model.ckpt"))
    converted, tok_a = bert_tf.from_pretrained(tmp_path)
    direct, tok_b = bert_tf.from_pretrained(minilm_model_dir)
    inputs = _ids(tok_b, "Sentence embeddings from a converted checkpoint.")
    np.testing.assert_array_equal(converted(inputs)["sequence_output"],
                                  direct(inputs)["sequence_output"])


@pytest.mark.long
def test_keras_file(release_dir, vocab, tmp_path):
    model, tokenizer = bert_tf.from_pretrained(release_dir, lambda c: BertClassifier(c, 2),
                                               vocab_file=vocab)
    path = tmp_path / "classifier.keras"
    model.save(path)
    shutil.copy(vocab, tmp_path / "vocab.txt")
    loaded, loaded_tokenizer = bert_tf.from_pretrained(path)
    assert isinstance(loaded, BertClassifier)
    inputs = _ids(loaded_tokenizer, "the same logits after a round trip")
    np.testing.assert_array_equal(model(inputs)["logits"], loaded(inputs)["logits"])
    with pytest.raises(UserInputError, match="holds its own model"):
        bert_tf.from_pretrained(path, BertEncoder)


def test_encoder_savedmodel_export_with_dropout(release_dir, vocab, tmp_path):
    from bert_tf.export import export_encoder_savedmodel

    encoder, _ = bert_tf.from_pretrained(release_dir, with_tokenizer=False)
    assert encoder.config.hidden_dropout_prob == 0.1  # the published dropout
    export_encoder_savedmodel(encoder, str(tmp_path / "export"))
    model, tokenizer = bert_tf.from_pretrained(tmp_path / "export", vocab_file=vocab)
    _assert_weights_are(model, read_checkpoint(release_dir / "bert_model.ckpt"))
    inputs = _ids(tokenizer, "exported and loaded again")
    np.testing.assert_array_equal(model(inputs)["pooled_output"], encoder(inputs)["pooled_output"])


def test_preset_names(vocab):
    names = list_presets()
    assert len(names) == 30 and "uncased_L-12_H-768_A-12" in names
    assert "chinese_L-12_H-768_A-12" in names and bert_tf.list_presets() == names
    model, tokenizer = bert_tf.from_pretrained("uncased_L-2_H-128_A-2", vocab_file=vocab)
    assert model.config == preset_config("uncased_L-2_H-128_A-2")
    assert (model.config.num_hidden_layers, model.config.hidden_size) == (2, 128)
    assert model.config.hidden_dropout_prob == 0.1
    out = model(_ids(tokenizer, "a randomly initialised model runs"))
    assert out["sequence_output"].shape == (1, 16, 128)


def test_preset_without_vocab_says_what_to_do():
    with pytest.raises(UserInputError) as e:
        bert_tf.from_pretrained("cased_L-12_H-768_A-12")
    message = str(e.value)
    assert "\n" not in message and "no weights" in message and "28996-line" in message
    model, tokenizer = bert_tf.from_pretrained("uncased_L-2_H-128_A-2", with_tokenizer=False)
    assert tokenizer is None and model.config.vocab_size == 30522


def test_preset_with_a_vocab_of_another_model(vocab):
    with pytest.raises(ConfigError, match="30522 tokens but vocab_size is 21128"):
        bert_tf.from_pretrained("chinese_L-12_H-768_A-12", vocab_file=vocab)


def test_unknown_name_lists_what_was_looked_for(tmp_path):
    for name in ("uncased_L-3_H-100_A-1", str(tmp_path)):
        with pytest.raises(UserInputError) as e:
            bert_tf.from_pretrained(name)
        message = str(e.value)
        assert "\n" not in message and name in message
        for wanted in (".keras", "bert_config.json", "model.safetensors", "saved_model.pb",
                       "preset"):
            assert wanted in message


def test_casing_from_names():
    assert lower_case_of_name("/x/uncased_L-12_H-768_A-12") is True
    assert lower_case_of_name("cased_L-24_H-1024_A-16") is False
    assert lower_case_of_name("multi_cased_L-12_H-768_A-12") is False
    assert lower_case_of_name("multilingual_L-12_H-768_A-12") is True
    assert lower_case_of_name("chinese_L-12_H-768_A-12") is True
    assert lower_case_of_name("my_model") is None


def test_import_bert_tf_stays_light():
    code = ("import sys, bert_tf; assert 'tensorflow' not in sys.modules, 'tf imported'; "
            "assert callable(bert_tf.from_pretrained); print('ok')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
