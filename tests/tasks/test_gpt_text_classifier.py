"""`bert_tf.GptTextClassifier` (GPT-1 on raw text, the paper's input transformations inside a
`GptTextPreprocessor`, the auxiliary LM loss) and its preprocessor.

Default set (fast, no BPE encoder is traced): the transformation of ragged ids equals
`bert_tf.gpt.input_transforms` (with the cut as max_len) for every transformation; the training
loss is train.py's L3 = L2 + 0.5·L1 (`GptClassifier.compute_losses`); compile()'s defaults are
the paper's `OpenAIAdam` and the first fit sets the schedule's length; a `.keras` round trip
keeps weights, label names and the preprocessor's data; bad inputs are one line.

Long (`long`, the original BPE files of the GPT fixture folder, $BERT_TF_GPT_FIXTURES or
../shared/fixtures/original_gpt, and a tiny random GPT-1 of that vocabulary saved in OpenAI's
layout): the preprocessor's ids equal the original encoder's recorded ids (bpe_encoding.jsonl)
except the documented kind (ftfy's mojibake repair, texts TF cannot hold) and the transformed
inputs equal the Python path's; `from_pretrained` + `fit` on lists, numpy arrays and tf.data +
`predict` + `.save` -> `keras.models.load_model` in a fresh process after `import bert_tf` only
gives the same probabilities, and `.export()`'s raw-text `serving_default` gives them within
1e-5; multiple choice and single texts fit and predict.
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

from bert_tf.errors import UserInputError

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]
GPT_FIXTURES = pathlib.Path(os.environ.get(
    "BERT_TF_GPT_FIXTURES", PROJECT_ROOT.parent / "shared" / "fixtures" / "original_gpt"))
NO_RULES = {"char_map": {}, "spacy_rules": {}}  # the encoder is never built in these tests
N_VOCAB = 50


def _tiny(task: str, num_classes=2, regression=False, pdrop=0.0, seq=16):
    import keras

    from bert_tf.gpt.config import GptConfig
    from bert_tf.gpt.task_model import GptClassifier
    from bert_tf.tasks.text_models.gpt_preprocessor import GPT_TASKS, GptTextPreprocessor

    keras.utils.set_random_seed(3)
    config = GptConfig(n_vocab=N_VOCAB, n_special=3, n_ctx=seq, n_embd=16, n_head=2, n_layer=1,
                       embd_pdrop=pdrop, attn_pdrop=pdrop, resid_pdrop=pdrop, clf_pdrop=pdrop)
    backbone = GptClassifier(config, task=GPT_TASKS[task],
                             num_classes=None if task == "multiple_choice" else num_classes,
                             regression=regression, name="gpt_classifier")
    pre = GptTextPreprocessor([f"s{i}" for i in range(N_VOCAB)], ["s 1"], seq, task,
                              text_rules=NO_RULES)
    return backbone, pre


def _ragged(rows):
    import tensorflow as tf

    return tf.ragged.constant(rows, dtype=tf.int32, ragged_rank=1)


def test_transform_ids_equals_the_python_transformations():
    from bert_tf.gpt import input_transforms as it
    from bert_tf.tasks.text_models.gpt_preprocessor import text_budget, transform_ids

    rng = np.random.RandomState(0)
    special = it.SpecialTokens(100, 101, 102)
    width = 20
    a = [rng.randint(0, 100, size=n).tolist() for n in (0, 3, 8, 25)]
    b = [rng.randint(0, 100, size=n).tolist() for n in (5, 0, 12, 30)]
    ids = (special.start, special.delimiter, special.classify)
    cut = text_budget(width, "single")
    got = transform_ids(_ragged(a), None, ids, cut, width)
    want = it.classification_inputs(a, width, special, max_len=cut)
    np.testing.assert_array_equal(got["token_ids"].numpy(), want.token_ids)
    np.testing.assert_array_equal(got["mask"].numpy(), want.mask)
    cut = text_budget(width, "entailment")
    assert cut == (width - 3) // 2
    got = transform_ids(_ragged(a), _ragged(b), ids, cut, width)
    want = it.entailment_inputs(a, b, width, special, max_len=cut)
    np.testing.assert_array_equal(got["token_ids"].numpy(), want.token_ids)
    np.testing.assert_array_equal(got["mask"].numpy(), want.mask)
    # a smaller cut than the budget
    got = transform_ids(_ragged(a), _ragged(b), ids, 4, width)
    want = it.entailment_inputs(a, b, width, special, max_len=4)
    np.testing.assert_array_equal(got["token_ids"].numpy(), want.token_ids)


def test_training_loss_is_classifier_plus_half_lm():
    import keras

    from bert_tf.tasks.text_models.gpt_text_classifier import GptTextClassifier

    backbone, pre = _tiny("similarity")
    model = GptTextClassifier(backbone, pre, ["no", "yes"])
    rng = np.random.RandomState(1)
    ids = rng.randint(0, N_VOCAB, size=(3, 2, 16)).astype(np.int32)
    ids[:, :, 0] = N_VOCAB
    ids[:, :, 9] = N_VOCAB + 2  # the extract token
    ids[:, :, 10:] = 0
    mask = np.zeros(ids.shape, np.float32)
    mask[:, :, :10] = 1
    labels = np.array([0, 1, 1])
    logits = model({"token_ids": ids, "mask": mask}, training=True)
    assert logits.shape == (3, 2)
    extra = float(sum(float(x) for x in model.losses))
    clf = float(keras.losses.SparseCategoricalCrossentropy(from_logits=True)(labels, logits))
    want = backbone.compute_losses(backbone({"token_ids": ids}, training=True), ids, mask,
                                   labels)
    assert backbone.lm_coef == 0.5
    np.testing.assert_allclose(clf + extra, float(want["train_loss"]), rtol=1e-5)
    # prediction: no LM term, the same logits as the token-id model
    out = model({"token_ids": ids, "mask": mask}, training=False)
    np.testing.assert_allclose(out.numpy(), backbone({"token_ids": ids})["logits"].numpy(),
                               rtol=0, atol=1e-6)


def test_compile_defaults_are_the_papers_openai_adam():
    import tensorflow as tf

    from bert_tf.tasks.text_models.gpt_text_classifier import GptTextClassifier
    from bert_tf.training.openai_adam import OpenAIAdam

    model = GptTextClassifier(*_tiny("single"))
    model.compile()
    opt = model.optimizer
    assert isinstance(opt, OpenAIAdam)
    assert float(opt.base_learning_rate.numpy()) == pytest.approx(6.25e-5, rel=1e-6)  # float32
    assert (opt.warmup, opt.schedule, opt.l2, opt.max_grad_norm) == (0.002, "warmup_linear",
                                                                     0.01, 1.0)
    ds = tf.data.Dataset.range(10).batch(4)  # 3 batches
    model._set_schedule(ds, epochs=3, steps_per_epoch=None)  # pylint: disable=protected-access
    assert opt.t_total == 9
    model.compile(optimizer="adam")
    model._set_schedule(ds, epochs=3, steps_per_epoch=None)  # pylint: disable=protected-access
    assert not isinstance(model.optimizer, OpenAIAdam)


def test_keras_round_trip_keeps_weights_labels_and_preprocessor(tmp_path):
    import keras

    from bert_tf.tasks.text_models import registration
    from bert_tf.tasks.text_models.gpt_text_classifier import GptTextClassifier

    registration.register_all()
    model = GptTextClassifier(*_tiny("entailment", num_classes=3), ["a", "b", "c"])
    ids = np.random.RandomState(2).randint(0, N_VOCAB, size=(2, 16)).astype(np.int32)
    inputs = {"token_ids": ids, "mask": np.ones(ids.shape, np.float32)}
    path = str(tmp_path / "gpt.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded, GptTextClassifier)
    assert loaded.label_names == ["a", "b", "c"] and loaded.input_transform == "entailment"
    assert loaded.preprocessor.vocabulary == model.preprocessor.vocabulary
    assert loaded.preprocessor.merges == ["s 1"] and loaded.preprocessor.cut == 6
    np.testing.assert_array_equal(loaded(inputs).numpy(), model(inputs).numpy())
    assert GptTextClassifier.from_pretrained(path, input_transform="entailment").label_names == [
        "a", "b", "c"]
    with pytest.raises(UserInputError, match="input_transform is 'entailment', not 'single'"):
        GptTextClassifier.from_pretrained(path)


def test_choice_rows_and_bad_inputs_are_one_line():
    from bert_tf.tasks.text_models.gpt_preprocessor import GptTextPreprocessor, as_choice_array
    from bert_tf.tasks.text_models.gpt_text_classifier import GptTextClassifier

    rows = as_choice_array([("ctx", ["a", "b"]), ("ctx2", ["c", "d"])])
    assert rows.shape == (2, 3) and rows[1].tolist() == ["ctx2", "c", "d"]
    same = as_choice_array({"context": ["ctx", "ctx2"], "choices": [["a", "b"], ["c", "d"]]})
    assert same.tolist() == rows.tolist()
    assert as_choice_array((["ctx", "ctx2"], [["a", "b"], ["c", "d"]])).tolist() == rows.tolist()
    cases = [
        (lambda: as_choice_array([("c", ["a", "b"]), ("c", ["a"])]),
         "x: row 1 has 1 choices, row 0 has 2; every row needs the same number of choices"),
        (lambda: as_choice_array(["just a text"]),
         "x: row 0: expected (context, [choice, ...]); got 'just a text'"),
        (lambda: GptTextPreprocessor(["a"], ["a b"], 16, "pairs", text_rules=NO_RULES),
         "input_transform='pairs'; expected one of single, entailment, similarity, "
         "multiple_choice"),
        (lambda: GptTextPreprocessor(["a"], ["a b"], 16, "entailment", max_text_length=7,
                                     text_rules=NO_RULES),
         "max_text_length=7; expected 0 (the budget) to 6 ((sequence_length - 1 - parts) // "
         "parts for entailment, so that every sequence fits)"),
        (lambda: GptTextPreprocessor(["a"], ["a b c"], 16, text_rules=NO_RULES),
         "GptTextPreprocessor: merge 0 is 'a b c'; expected two symbols separated by a space"),
        (lambda: GptTextClassifier(*_tiny("multiple_choice"), ["x", "y"]),
         "multiple_choice has no label_names (the label is the index of the right choice)"),
    ]
    for make, message in cases:
        with pytest.raises(UserInputError) as error:
            make()
        assert str(error.value) == message
    backbone, _ = _tiny("single")
    _, other = _tiny("entailment")
    with pytest.raises(UserInputError, match="input_transform 'entailment' feeds a "
                                             "'entailment' model, but the GptClassifier's task "
                                             "is 'classification'"):
        GptTextClassifier(backbone, other)


# ---------------------------------------------------------------------------------------------
# Long: the original BPE vocabulary, a tiny GPT-1 of that vocabulary in OpenAI's layout
# ---------------------------------------------------------------------------------------------
PAIRS = [("A man is sleeping on the couch.", "Someone rests."),
         ("It's cold outside, isn't it?", "The weather is hot!"),
         ("Stocks fell sharply on Monday.", "Shares dropped a lot."),
         ("", "An empty first text."),
         (" ".join(["A very long sentence that the model must cut."] * 6), "Short.")]
LABELS = ["entailment", "not_entailment"]


def _bpe_files() -> tuple[pathlib.Path, pathlib.Path]:
    encoders = sorted((GPT_FIXTURES / "bpe").glob("encoder_bpe_*.json"))
    merges = sorted((GPT_FIXTURES / "bpe").glob("vocab_*.bpe"))
    if not encoders or not merges:
        pytest.skip(f"needs the original BPE files in {GPT_FIXTURES / 'bpe'} (the GPT-1 "
                    "fixtures: ../shared/fixtures/original_gpt or $BERT_TF_GPT_FIXTURES)")
    for module in ("ftfy", "spacy"):
        pytest.importorskip(module, reason=f"the GPT-1 encoder needs {module} ([gpt] extra)")
    return encoders[0], merges[0]


@pytest.fixture(scope="module")
def gpt_folder(tmp_path_factory) -> pathlib.Path:
    """A tiny random GPT-1 with the original BPE vocabulary, in OpenAI's layout (params +
    config.json + special_rows.npy) with the BPE files beside it."""
    import keras

    from bert_tf.gpt.config import GptConfig
    from bert_tf.tasks.gpt_causal_lm import GptCausalLM

    encoder, merges = _bpe_files()
    n_vocab = len(json.loads(encoder.read_text(encoding="utf-8")))
    folder = tmp_path_factory.mktemp("gpt_text")
    keras.utils.set_random_seed(7)
    lm = GptCausalLM(GptConfig(n_vocab=n_vocab, n_special=3, n_ctx=32, n_embd=16, n_head=2,
                               n_layer=1), jit_compile=False)
    lm.save_pretrained(folder)
    shutil.copy(encoder, folder / encoder.name)
    shutil.copy(merges, folder / merges.name)
    return folder


@pytest.mark.long
def test_preprocessor_ids_equal_the_original_encoder(gpt_folder):
    import tensorflow as tf

    from bert_tf.gpt import input_transforms as it
    from bert_tf.tasks.text_models.gpt_text_classifier import GptTextClassifier
    from bert_tf.tokenization.gpt_text_encoder import TextEncoder

    records_file = GPT_FIXTURES / "bpe_encoding.jsonl"
    if not records_file.exists():
        pytest.skip(f"needs {records_file}")
    records = [json.loads(line) for line in records_file.read_text(encoding="utf-8")
               .splitlines() if line.strip()]
    clf = GptTextClassifier.from_pretrained(gpt_folder, num_classes=2, sequence_length=32,
                                            input_transform="entailment")
    pre = clf.preprocessor

    def holdable(text):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: no tf.string holds it
            return False
        return True

    usable = [r for r in records if holdable(r["text"])]
    got = pre.encode(tf.constant([r["text"].encode("utf-8") for r in usable])).to_list()
    differing = [r["id"] for r, ids in zip(usable, got) if ids != r["ids"]]
    # the documented difference: ftfy's mojibake repair (a text ftfy changes) is not reproduced
    assert all(r["fixed"] != r["text"] for r in usable if r["id"] in differing), differing
    assert len(differing) <= max(2, len(records) // 100), differing

    # the transformed inputs equal the Python encoder + input_transforms (cut = the budget)
    encoder = TextEncoder(*_bpe_files())
    a = encoder.encode([x for x, _ in PAIRS], verbose=False)
    b = encoder.encode([y for _, y in PAIRS], verbose=False)
    special = it.SpecialTokens.for_config(clf.backbone.config)
    want = it.entailment_inputs(a, b, 32, special, max_len=(32 - 3) // 2)
    out = pre((tf.constant([x for x, _ in PAIRS]), tf.constant([y for _, y in PAIRS])))
    np.testing.assert_array_equal(out["token_ids"].numpy(), want.token_ids)
    np.testing.assert_array_equal(out["mask"].numpy(), want.mask)


LOAD_AND_PREDICT = """
import json, sys
import bert_tf, keras, numpy as np
model = keras.models.load_model(sys.argv[1])
pairs = json.loads(sys.argv[2])
print(json.dumps({"type": type(model).__name__, "labels": model.label_names,
                  "probs": model.predict(pairs).tolist()}))
"""


@pytest.mark.long
def test_fit_predict_save_fresh_process_and_export(gpt_folder, tmp_path, harness):
    import keras
    import tensorflow as tf

    import bert_tf

    keras.utils.set_random_seed(11)
    clf = bert_tf.GptTextClassifier.from_pretrained(gpt_folder, num_classes=2,
                                                    sequence_length=24,
                                                    input_transform="entailment",
                                                    label_names=LABELS)
    labels = [LABELS[i % 2] for i in range(len(PAIRS))]
    history = clf.fit(PAIRS, labels, batch_size=2, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][-1])
    assert clf.optimizer.t_total == 3  # 5 pairs in batches of 2, one epoch
    clf.fit(np.array(PAIRS, dtype=object), np.array([0, 1, 0, 1, 0]), batch_size=5, verbose=0)
    ds = tf.data.Dataset.from_tensor_slices(((tf.constant([x for x, _ in PAIRS]),
                                              tf.constant([y for _, y in PAIRS])),
                                             tf.constant(labels))).batch(2)
    clf.fit(ds, verbose=0)
    probs = clf.predict(PAIRS)
    assert probs.shape == (len(PAIRS), 2) and probs.dtype == np.float32
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    assert set(clf.predict_labels(PAIRS)) <= set(LABELS)
    np.testing.assert_allclose(clf.predict({"text_a": [x for x, _ in PAIRS],
                                            "text_b": [y for _, y in PAIRS]}), probs,
                               rtol=0, atol=1e-6)

    path = tmp_path / "gpt.keras"
    clf.save(path)
    proc = subprocess.run([sys.executable, "-c", LOAD_AND_PREDICT, str(path), json.dumps(PAIRS)],
                          capture_output=True, text=True, timeout=900, cwd=PROJECT_ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    fresh = json.loads(proc.stdout.strip().splitlines()[-1])
    assert fresh["type"] == "GptTextClassifier" and fresh["labels"] == LABELS
    np.testing.assert_array_equal(np.asarray(fresh["probs"], np.float32), probs)

    import tensorflow_text  # noqa: F401  (the raw-text signature's ops)

    version = clf.export(tmp_path / "export")
    serve = tf.saved_model.load(version).signatures["serving_default"]
    out = serve(text_a=tf.constant([x for x, _ in PAIRS]), text_b=tf.constant([y for _, y in PAIRS]))
    np.testing.assert_allclose(out["probabilities"].numpy(), probs, rtol=0, atol=1e-5)
    assert [x.decode() for x in out["labels"].numpy()] == clf.predict_labels(PAIRS)
    # TF Serving's C-API loader (no Python) gives the same probabilities.
    from bert_tf.export import loader_harness as lh

    responses, proc = lh.run_signature(harness, version, [{
        "text_a": np.array([x for x, _ in PAIRS], object),
        "text_b": np.array([y for _, y in PAIRS], object)}])
    assert proc.returncode == 0, proc.stderr[-3000:]
    np.testing.assert_allclose(responses[0]["probabilities"], probs, rtol=0, atol=1e-5)


@pytest.mark.long
def test_multiple_choice_and_single_texts(gpt_folder):
    import bert_tf

    mc = bert_tf.GptTextClassifier.from_pretrained(gpt_folder, sequence_length=24,
                                                   input_transform="multiple_choice")
    rows = [("Karen went to the store.", ["She bought milk.", "She flew to the moon."]),
            ("It rained all day.", ["The streets were wet.", "The streets were dry."]),
            ("He missed the bus.", ["He walked to work.", "He sang a song."])]
    mc.fit(rows, [0, 0, 0], batch_size=3, verbose=0)
    probs = mc.predict(rows)
    assert probs.shape == (3, 2)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(mc.predict({"context": [c for c, _ in rows],
                                           "choices": [ch for _, ch in rows]}), probs,
                               rtol=0, atol=1e-6)
    with pytest.raises(UserInputError, match="a label is outside 0..1"):
        mc.fit(rows, [0, 2, 0], verbose=0)

    single = bert_tf.GptTextClassifier.from_pretrained(gpt_folder, sequence_length=16,
                                                       label_names=["neg", "pos"])
    texts = np.array(["a fine film", "a dull, boring one!", "great", "awful"])
    single.fit(texts, ["pos", "neg", "pos", "neg"], batch_size=4, verbose=0)
    assert single.predict(texts).shape == (4, 2)
    # Texts take TextTask.predict_raw's one function, multiple choice rows Keras' loop; both
    # equal Keras' loop on the tf.data pipeline.
    import keras

    for model, x in ((single, texts), (mc, rows)):
        np.testing.assert_allclose(model.predict_raw(x, batch_size=3), keras.Model.predict(
            model, model.text_dataset(x, batch_size=3), verbose=0), rtol=0, atol=1e-6)
    assert single._texts_for_one_function(texts) is not None
    assert mc._texts_for_one_function(rows) is None
