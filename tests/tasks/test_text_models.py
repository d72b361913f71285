"""Raw-text Keras task models (bert_tf.tasks.text_models): the preprocessor layer against the
original tokenizer + packing, fit/predict on strings, `.keras` round trips, registration after a
bare `import bert_tf`, and (long) the full round trip of issue 30: fine-tune from a Google-layout
folder on 64 SST-2 sentences, save, reload in a fresh process, export, serve (TF and C API)."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=64, type_vocab_size=2)
SEQ = 32
# Probabilities from Python (Keras predict) vs an export (TF and the C API): the same float32
# graph except the export trims padding to a multiple of 8 (task_models), so only summation
# order differs; 1e-5 is the bound tests/export/test_loader_harness.py uses.
ATOL = 1e-5

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def read_sst2(shared_data: pathlib.Path, n: int = 64) -> tuple[list[str], list[int]]:
    """The first `n` rows of GLUE SST-2's train.tsv (header `sentence<TAB>label`)."""
    lines = (shared_data / "glue" / "SST-2" / "train.tsv").read_text(encoding="utf-8").splitlines()
    header = lines[0].split("\t")
    rows = [line.split("\t") for line in lines[1:n + 1]]
    s, l = header.index("sentence"), header.index("label")
    return [r[s] for r in rows], [int(r[l]) for r in rows]


def tiny_vocab(texts: list[str]) -> list[str]:
    """Specials + the words of `texts` (the original BasicTokenizer's words) + a few pieces."""
    from bert_tf.tokenization import BasicTokenizer

    basic = BasicTokenizer(do_lower_case=True)
    words = sorted({w for t in texts for w in basic.tokenize(t)})
    return SPECIALS + words + ["##s", "##ing", "##ed"]


def write_google_folder(folder: pathlib.Path, vocab: list[str], seed: int = 0) -> pathlib.Path:
    """A tiny Google-release-layout folder: bert_config.json, vocab.txt, bert_model.ckpt.*
    (random weights written by bert_tf's own checkpoint writer)."""
    import keras

    from bert_tf.checkpoints import save_original_checkpoint
    from bert_tf.modeling import BertConfig, BertEncoder

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("".join(t + "\n" for t in vocab), encoding="utf-8")
    config = BertConfig(vocab_size=len(vocab), **TINY)
    config.to_json_file(folder / "bert_config.json")
    keras.utils.set_random_seed(seed)
    encoder = BertEncoder(config).build_from_config_shapes()
    save_original_checkpoint(encoder, folder / "bert_model.ckpt")
    return folder


TEXTS = ["hide new secretions from the parental units", "contains no wit , only labored gags",
         "that loves its characters and communicates something rather beautiful about human "
         "nature", "remains utterly satisfied to remain the same throughout",
         "on the worst revenge-of-the-nerds clichés the filmmakers could dredge up",
         "that 's far too tragic to merit such superficial treatment"]


@pytest.fixture(scope="module")
def google_folder(tmp_path_factory) -> pathlib.Path:
    return write_google_folder(tmp_path_factory.mktemp("tiny_google"), tiny_vocab(TEXTS))


@pytest.fixture(scope="module")
def vocab_folder(tmp_path_factory) -> pathlib.Path:
    """A folder with only the tiny vocab.txt (the preprocessor tests need no weights)."""
    folder = tmp_path_factory.mktemp("tiny_vocab")
    (folder / "vocab.txt").write_text("".join(t + "\n" for t in tiny_vocab(TEXTS)),
                                      encoding="utf-8")
    return folder


# ---- the preprocessor --------------------------------------------------------------------

def test_preprocessor_ids_equal_the_original_packing(vocab_folder):
    import tensorflow as tf

    from bert_tf.tasks.text_models import BertTextPreprocessor
    from bert_tf.tokenization import FullTokenizer
    from bert_tf.tokenization.packing import pack_tokens

    tok = FullTokenizer(str(vocab_folder / "vocab.txt"), do_lower_case=True)
    vocab = (vocab_folder / "vocab.txt").read_text(encoding="utf-8").splitlines()
    pre = BertTextPreprocessor(vocab, sequence_length=12)
    texts = TEXTS + ["UNSEEN Wörds, and a very long one " * 5, ""]
    single = pre(tf.constant(texts))
    pairs = pre(tf.constant([[a, b] for a, b in zip(texts, texts[::-1])]))
    for i, text in enumerate(texts):
        want = pack_tokens(tok.tokenize(text), None, 12, tok.vocab)
        assert single["input_word_ids"][i].numpy().tolist() == want.input_ids
        assert single["input_mask"][i].numpy().tolist() == want.input_mask
        assert single["input_type_ids"][i].numpy().tolist() == want.segment_ids
        want = pack_tokens(tok.tokenize(text), tok.tokenize(texts[::-1][i]), 12, tok.vocab)
        assert pairs["input_word_ids"][i].numpy().tolist() == want.input_ids
        assert pairs["input_type_ids"][i].numpy().tolist() == want.segment_ids


def test_preprocessor_config_holds_the_vocab_not_a_path(vocab_folder):
    import keras

    from bert_tf.errors import UserInputError
    from bert_tf.tasks.text_models import BertTextPreprocessor

    vocab = (vocab_folder / "vocab.txt").read_text(encoding="utf-8").splitlines()
    pre = BertTextPreprocessor(vocab, sequence_length=16, do_lower_case=False)
    config = pre.get_config()
    assert config["vocabulary"] == vocab and str(vocab_folder) not in json.dumps(config)
    again = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(pre))
    assert again.vocabulary == vocab and again.sequence_length == 16 and not again.do_lower_case
    with pytest.raises(UserInputError, match=r"lacks \[CLS\]"):
        BertTextPreprocessor(["[UNK]", "[SEP]", "a"])


def test_text_inputs_forms():
    from bert_tf.errors import UserInputError
    from bert_tf.tasks.text_models.preprocessors import as_text_array

    assert as_text_array(["a", "b"]).shape == (2,)
    assert as_text_array("a").shape == (1,)
    assert as_text_array([("a", "b"), ("c", "d")]).shape == (2, 2)
    assert as_text_array((["a", "c"], ["b", "d"])).tolist() == [["a", "b"], ["c", "d"]]
    assert as_text_array({"text_a": ["a"], "text_b": ["b"]}).shape == (1, 2)
    with pytest.raises(UserInputError, match="item 1 is int"):
        as_text_array(["a", 3])
    with pytest.raises(UserInputError, match="equally long"):
        as_text_array((["a"], ["b", "c"]))


# ---- the classifier ----------------------------------------------------------------------

@pytest.mark.long
def test_classifier_fits_and_predicts_strings_in_every_form(google_folder, tmp_path):
    import keras
    import tensorflow as tf

    import bert_tf
    from bert_tf.errors import UserInputError

    keras.utils.set_random_seed(1)
    clf = bert_tf.BertTextClassifier.from_pretrained(str(google_folder), num_classes=2,
                                                     sequence_length=16,
                                                     label_names=["neg", "pos"])
    labels = ["neg", "neg", "pos", "neg", "neg", "neg"]
    history = clf.fit(TEXTS, labels, batch_size=3, epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2
    schedule = clf.optimizer._learning_rate  # the original's warm-up + linear decay
    assert schedule.num_train_steps == 4 and schedule.num_warmup_steps == 0
    probs = clf.predict(TEXTS)
    assert probs.shape == (6, 2) and probs.dtype == np.float32
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(clf.predict(np.array(TEXTS)), probs)
    ds = tf.data.Dataset.from_tensor_slices(TEXTS).batch(4)
    np.testing.assert_allclose(clf.predict(ds), probs, atol=1e-6)
    labelled = tf.data.Dataset.from_tensor_slices((TEXTS, labels)).batch(4)
    result = clf.evaluate(labelled, return_dict=True, verbose=0)
    assert set(result) >= {"loss", "accuracy"}
    assert clf.predict_labels(TEXTS[:2])[0] in ("neg", "pos")
    pair_probs = clf.predict((TEXTS[:3], TEXTS[3:]))
    assert pair_probs.shape == (3, 2)
    np.testing.assert_allclose(clf.predict(list(zip(TEXTS[:3], TEXTS[3:]))), pair_probs,
                               atol=1e-6)
    with pytest.raises(UserInputError, match="not among the model's label_names"):
        clf.fit(TEXTS[:2], ["neg", "meh"], verbose=0)

    path = tmp_path / "clf.keras"
    clf.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded, bert_tf.BertTextClassifier) and loaded.label_names == ["neg", "pos"]
    np.testing.assert_array_equal(loaded.predict(TEXTS), probs)
    again = bert_tf.BertTextClassifier.from_pretrained(str(path))
    np.testing.assert_array_equal(again.predict(TEXTS), probs)


@pytest.mark.long
def test_regression_and_label_inference(google_folder):
    import keras

    import bert_tf

    keras.utils.set_random_seed(2)
    reg = bert_tf.BertTextClassifier.from_pretrained(str(google_folder), task_type="regression",
                                                     sequence_length=16)
    reg.fit(TEXTS, [0.0, 1.5, 4.0, 2.0, 0.5, 1.0], epochs=1, verbose=0)
    values = reg.predict(TEXTS)
    assert values.shape == (6,) and values.dtype == np.float32
    clf = bert_tf.BertTextClassifier.from_pretrained(str(google_folder), num_classes=2,
                                                     sequence_length=16)
    clf.fit(TEXTS, ["b", "a", "a", "b", "a", "a"], verbose=0)
    assert clf.label_names == ["a", "b"]


def test_predict_on_texts_traces_once_and_equals_keras_loop(google_folder):
    """In-memory texts go through one traced function (preprocessor + model) kept with the
    model: the same outputs as Keras' own loop on the tf.data pipeline, one trace per input
    shape (texts, pairs) however many calls and sizes; a dataset input still takes Keras' loop."""
    import keras
    import tensorflow as tf

    import bert_tf

    keras.utils.set_random_seed(2)
    clf = bert_tf.BertTextClassifier.from_pretrained(str(google_folder), num_classes=3,
                                                     sequence_length=SEQ)
    pairs = list(zip(TEXTS, TEXTS[::-1]))
    for model, inputs in ((clf, TEXTS), (clf, pairs)):
        traces = []
        preprocess = model._preprocess

        def counting(texts, preprocess=preprocess, traces=traces):
            traces.append(texts.shape.rank)  # Python runs only while tracing
            return preprocess(texts)

        model._preprocess = counting
        fast = model.predict_raw(inputs, batch_size=4)
        keras_loop = keras.Model.predict(model, model.text_dataset(inputs, batch_size=4),
                                         verbose=0)
        np.testing.assert_allclose(fast, keras_loop, atol=ATOL, rtol=0)
        traces_after_first = len(traces)
        for n in (1, 5, len(inputs)):
            np.testing.assert_allclose(model.predict_raw(inputs[:n], batch_size=4),
                                       keras_loop[:n], atol=ATOL, rtol=0)
        assert len(traces) == traces_after_first, traces  # no trace after the first call
        assert traces_after_first <= 2  # ours, plus the dataset map's of Keras' loop
        del model._preprocess
    ds = tf.data.Dataset.from_tensor_slices(TEXTS).batch(4)
    np.testing.assert_allclose(clf.predict_raw(ds), clf.predict_raw(TEXTS), atol=ATOL, rtol=0)
    # The one function cuts each batch to its longest text (rounded up to 8): the backbone is
    # traced on a sequence axis of unknown length, Keras' loop on the full SEQ.
    seen = []
    emb = bert_tf.BertTextEmbedder.from_pretrained(str(google_folder), sequence_length=SEQ)
    call = type(emb.backbone).call

    def spy(self, *args, **kwargs):
        seen.append(args[0]["input_word_ids"].shape[-1])
        return call(self, *args, **kwargs)

    type(emb.backbone).call = spy
    try:
        emb.predict_raw(TEXTS[:2])
        keras.Model.predict(emb, emb.text_dataset(TEXTS[:2]), verbose=0)
    finally:
        type(emb.backbone).call = call
    assert seen[0] is None and seen[-1] == SEQ, seen


def test_window_starts_cover_the_text():
    from bert_tf.tasks.text_models.text_classifier import window_starts

    assert window_starts(5, 10, 4) == [0]
    assert window_starts(10, 10, 4) == [0]
    assert window_starts(11, 10, 4) == [0, 1]
    assert window_starts(20, 10, 5) == [0, 5, 10]
    assert window_starts(21, 10, 5) == [0, 5, 10, 11]


@pytest.mark.long
def test_classifier_sliding_windows(google_folder):
    import keras

    import bert_tf

    keras.utils.set_random_seed(6)
    clf = bert_tf.BertTextClassifier.from_pretrained(str(google_folder), num_classes=3,
                                                     sequence_length=16)
    short = TEXTS[:2]  # each fits in 14 pieces: one window, the plain prediction
    np.testing.assert_allclose(clf.predict(short, window_stride=7), clf.predict(short),
                               atol=1e-6)
    long_text = " ".join(TEXTS)
    probs = clf.predict([long_text, TEXTS[0]], window_stride=7)
    assert probs.shape == (2, 3)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    assert not np.array_equal(probs[0], clf.predict([long_text])[0])  # more than one window


# ---- registration --------------------------------------------------------------------------

def test_registration_list_matches_the_modules():
    from keras.src.saving import object_registration

    from bert_tf.tasks.text_models import registration

    registration.register_all()
    registered = {k.split(">")[1] for k, v in object_registration.GLOBAL_CUSTOM_OBJECTS.items()
                  if k.startswith("bert_tf>") and v.__module__.startswith("bert_tf.")
                  and v.__name__ != "StandIn" and not v.__module__.endswith("registration")}
    listed = {n for names in registration.REGISTERED.values() for n in names}
    assert registered == listed


def test_bare_import_stays_light():
    """A fresh process: `import bert_tf` imports neither Keras nor TensorFlow."""
    script = ("import sys, bert_tf\n"
              "print('keras' in sys.modules, 'tensorflow' in sys.modules)\n")
    run = subprocess.run([sys.executable, "-c", script], cwd=PROJECT_ROOT, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["False", "False"]


@pytest.mark.long
def test_bare_import_registers(tmp_path):
    """A `.keras` file of a bert_tf encoder loads with `keras.models.load_model` in a fresh
    process that imported only bert_tf and keras."""
    script = (
        "import keras\n"
        "from bert_tf.modeling import BertConfig\n"
        "c = BertConfig(vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,"
        " intermediate_size=16, max_position_embeddings=8)\n"
        "enc = __import__('bert_tf.modeling', fromlist=['BertEncoder']).BertEncoder(c)"
        ".build_from_config_shapes()\n"
        f"enc.save({str(tmp_path / 'enc.keras')!r})\n")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    run = subprocess.run([sys.executable, "-c", script], cwd=PROJECT_ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    load = ("import bert_tf, keras\n"
            f"m = keras.models.load_model({str(tmp_path / 'enc.keras')!r})\n"
            "print(type(m).__module__, type(m).__name__)\n")
    run = subprocess.run([sys.executable, "-c", load], cwd=PROJECT_ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["bert_tf.modeling.encoder", "BertEncoder"]


# ---- the long round trip (issue 30) ----------------------------------------------------------

FRESH_PREDICT = """
import json, sys
import numpy as np
import bert_tf
import keras
model = keras.models.load_model(sys.argv[1])
texts = json.loads(open(sys.argv[2]).read())
out = model.predict(texts)
np.save(sys.argv[3], np.concatenate(out) if isinstance(out, list) else out)
print(type(model).__name__)
"""


def fresh_predict(path: pathlib.Path, texts: list[str], tmp_path: pathlib.Path) -> np.ndarray:
    """`model.predict(texts)` in a fresh process that imported only bert_tf and keras."""
    (tmp_path / "texts.json").write_text(json.dumps(texts))
    out = tmp_path / "fresh.npy"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    run = subprocess.run([sys.executable, "-c", FRESH_PREDICT, str(path),
                          str(tmp_path / "texts.json"), str(out)], cwd=PROJECT_ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return np.load(out)


def serve_tf(export_dir: str, signature: str, **inputs) -> dict[str, np.ndarray]:
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the export's ops)

    fn = tf.saved_model.load(export_dir).signatures[signature]
    return {k: v.numpy() for k, v in fn(**{k: tf.constant(v) for k, v in inputs.items()}).items()}


@pytest.mark.long
def test_classifier_round_trip_on_sst2(shared_data, tmp_path, harness):
    import keras

    import bert_tf
    from bert_tf.export import loader_harness as lh

    texts, labels = read_sst2(shared_data, 64)
    folder = write_google_folder(tmp_path / "google", tiny_vocab(texts[:48]))
    keras.utils.set_random_seed(3)
    clf = bert_tf.BertTextClassifier.from_pretrained(str(folder), num_classes=2,
                                                     sequence_length=SEQ)
    clf.fit(texts, labels, batch_size=16, epochs=2, verbose=0)
    probs = clf.predict(texts)
    assert probs.shape == (64, 2)
    path = tmp_path / "clf.keras"
    clf.save(path)
    np.testing.assert_array_equal(fresh_predict(path, texts, tmp_path), probs)

    export = clf.export(tmp_path / "serving")
    assert pathlib.Path(export).name == "1"
    served = serve_tf(export, "serving_default", text=texts)
    np.testing.assert_allclose(served["probabilities"], probs, atol=ATOL, rtol=0)
    responses, proc = lh.run_signature(harness, export, [{"text": np.array(texts, object)}])
    assert proc.returncode == 0, proc.stderr[-3000:]
    np.testing.assert_allclose(responses[0]["probabilities"], probs, atol=ATOL, rtol=0)
    pairs = clf.predict((texts[:8], texts[8:16]))
    served = serve_tf(export, "serving_pair", text_a=texts[:8], text_b=texts[8:16])
    np.testing.assert_allclose(served["probabilities"], pairs, atol=ATOL, rtol=0)


@pytest.mark.long
def test_embedder_round_trip_on_sst2(shared_data, tmp_path, harness):
    import keras

    import bert_tf
    from bert_tf.export import loader_harness as lh

    texts, _ = read_sst2(shared_data, 16)
    folder = write_google_folder(tmp_path / "google", tiny_vocab(texts))
    keras.utils.set_random_seed(4)
    emb = bert_tf.BertTextEmbedder.from_pretrained(str(folder), sequence_length=SEQ,
                                                   pooling="mean")
    vectors = emb.predict(texts)
    assert vectors.shape == (16, TINY["hidden_size"])
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    sims = emb.similarity(texts[:2], texts)
    assert sims.shape == (2, 16)
    np.testing.assert_allclose(np.diag(sims[:, :2]), 1.0, rtol=1e-5)
    path = tmp_path / "emb.keras"
    emb.save(path)
    np.testing.assert_array_equal(fresh_predict(path, texts, tmp_path), vectors)
    export = emb.export(tmp_path / "serving")
    served = serve_tf(export, "serving_default", text=texts)
    np.testing.assert_allclose(served["embeddings"], vectors, atol=ATOL, rtol=0)
    responses, proc = lh.run_signature(harness, export, [{"text": np.array(texts, object)}])
    assert proc.returncode == 0, proc.stderr[-3000:]
    np.testing.assert_allclose(responses[0]["embeddings"], vectors, atol=ATOL, rtol=0)


def read_conll(shared_data: pathlib.Path, n: int = 32) -> tuple[list[list[str]], list[list[str]]]:
    """The first `n` sentences of CoNLL-2003's eng.train (`token POS chunk NER` lines)."""
    words, tags, sent_w, sent_t = [], [], [], []
    for line in (shared_data / "conll2003" / "eng.train").read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if not parts or parts[0] == "-DOCSTART-":
            if sent_w:
                words.append(sent_w)
                tags.append(sent_t)
                sent_w, sent_t = [], []
                if len(words) == n:
                    break
            continue
        sent_w.append(parts[0])
        sent_t.append(parts[-1])
    return words, tags


@pytest.mark.long
def test_token_classifier_round_trip_on_conll(shared_data, tmp_path, harness):
    import keras

    import bert_tf
    from bert_tf.export import loader_harness as lh
    from bert_tf.tasks.text_models.text_task import softmax

    words, tags = read_conll(shared_data, 32)
    labels = sorted({t for row in tags for t in row})
    folder = write_google_folder(tmp_path / "google", tiny_vocab([" ".join(w) for w in words]))
    keras.utils.set_random_seed(5)
    tagger = bert_tf.BertTextTokenClassifier.from_pretrained(
        str(folder), label_names=labels, sequence_length=SEQ)
    tagger.fit(words, tags, batch_size=8, epochs=1, verbose=0)
    probs = tagger.predict(words)
    assert len(probs) == 32 and probs[0].shape[1] == len(labels)
    kept = [len(p) for p in probs]
    assert all(k <= len(w) for k, w in zip(kept, words)) and kept[0] == len(words[0])
    predicted = tagger.predict_labels(words[:2])
    assert all(t in labels for t in predicted[0]) and len(predicted[0]) == len(words[0])
    path = tmp_path / "ner.keras"
    tagger.save(path)
    np.testing.assert_array_equal(fresh_predict(path, words, tmp_path), np.concatenate(probs))

    texts = [" ".join(w) for w in words[:8]]
    python = softmax(tagger.predict_raw(words[:8]))
    export = tagger.export(tmp_path / "serving")
    served = serve_tf(export, "serving_default", text=texts)
    ids = tagger.text_dataset(words[:8]).map(lambda x: x["input_word_ids"]).unbatch()
    np.testing.assert_array_equal(served["input_word_ids"], np.stack(list(ids.as_numpy_iterator())))
    np.testing.assert_allclose(served["probabilities"], python, atol=ATOL, rtol=0)
    responses, proc = lh.run_signature(harness, export, [{"text": np.array(texts, object)}])
    assert proc.returncode == 0, proc.stderr[-3000:]
    np.testing.assert_allclose(responses[0]["probabilities"], python, atol=ATOL, rtol=0)
