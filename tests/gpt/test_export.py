"""GPT-1 SavedModels: classifiers with raw text in (in-graph WordPiece or BPE + the paper's
transformations) and, through the export tool (tools/export_savedmodel.py --model_type=gpt_lm /
gpt_classifier), the LM and a fine-tuned classifier of the original GPT-1 fixture model; the
same serving checks as BERT's exports (op allowlist, dense outputs; TF Serving's C loader with
the tensorflow-text kernels), and the same numbers as the Python path."""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests.gpt.conftest import fixture_config

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]
GLUE = pathlib.Path(os.environ.get("BERT_TF_DATA",
                                  PROJECT_ROOT.parent / "shared" / "data")) / "glue"
SEQ = 48


@pytest.fixture(scope="module")
def c_loader(tmp_path_factory):
    """The C loader harness, compiled once for the module: (path, None), or (None, why not)."""
    from bert_tf.export import loader_harness as lh
    try:
        return lh.build_harness(tmp_path_factory.mktemp("harness")), None
    except lh.HarnessUnavailable as e:
        return None, str(e)


def _harness(c_loader) -> str:
    """The harness's path (skips when it cannot be built)."""
    path, why = c_loader
    if path is None:
        pytest.skip(f"cannot build the C loader harness: {why}")
    return path


@pytest.fixture(scope="module")
def rows():
    """Real MRPC sentence pairs (skips without ../shared/data)."""
    path = GLUE / "MRPC" / "dev.tsv"
    if not path.exists():
        pytest.skip(f"needs {path} (../shared/data)")
    lines = path.read_text(encoding="utf-8-sig").splitlines()[1:13]
    pairs = [line.split("\t")[3:5] for line in lines]
    # Also an empty text and one far longer than the sequence (cut in the graph).
    pairs += [["", pairs[0][1]], [" ".join([pairs[1][0]] * 10), pairs[2][1]]]
    return pairs


@pytest.fixture(scope="module")
def vocab(tmp_path_factory, rows):
    from bert_tf.tokenization import BasicTokenizer
    basic = BasicTokenizer(do_lower_case=True)
    tokens = sorted({t for pair in rows for text in pair for t in basic.tokenize(text)})
    # Leave some words out so that [UNK] and ## pieces occur.
    kept = [t for i, t in enumerate(tokens) if i % 7]
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    extra = [t for t in ("##s", "##e", "##d", "##ing", "a", "e", "s", "t") if t not in kept]
    path.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + kept + extra) + "\n",
                    encoding="utf-8")
    return path


def _model(vocab, task, num_classes=2):
    import keras
    from bert_tf.gpt.config import GptConfig
    from bert_tf.gpt.task_model import GptClassifier
    n_vocab = len(vocab.read_text(encoding="utf-8").splitlines())
    keras.utils.set_random_seed(5)
    config = GptConfig(n_vocab=n_vocab, n_special=3, n_ctx=64, n_embd=32, n_head=2, n_layer=2)
    return GptClassifier(config, task=task, num_classes=num_classes, name="gpt_classifier")


def _python_logits(model, vocab, rows, task, cut):
    from bert_tf.tasks.gpt_classifier import TaskRows, transform_rows
    from bert_tf.gpt.input_transforms import SpecialTokens
    from bert_tf.tokenization.gpt_text_encoder import WordPieceTextEncoder
    if task == "multiple_choice":
        texts = [[a] for a, _ in rows]
        choices = [[b, a, b] for a, b in rows]
    else:
        texts, choices = [list(r) for r in rows], None
    split = TaskRows("t", "test rows", texts, choices, np.zeros(len(rows), np.int32), [])
    arrays = transform_rows(split, task, WordPieceTextEncoder(vocab), SEQ,
                            SpecialTokens.for_config(model.config), cut)
    return model({"token_ids": arrays["token_ids"]}, training=False)["logits"].numpy(), arrays


@pytest.mark.parametrize("task", ["similarity", "entailment", "classification",
                                  "multiple_choice"])
@pytest.mark.long
def test_raw_text_signature_equals_the_python_path(vocab, rows, task, tmp_path):
    from bert_tf.export.serving_compat import check_serving_compatibility
    from bert_tf.export.gpt import export_gpt_classifier_savedmodel
    model = _model(vocab, task, num_classes=None if task == "multiple_choice" else 2)
    labels = None if task == "multiple_choice" else ["no", "yes"]
    path = export_gpt_classifier_savedmodel(model, str(tmp_path / "export"), 1, seq_length=SEQ,
                                            label_list=labels, vocab_file=str(vocab))
    report = check_serving_compatibility(path)
    assert report.ok, report.problems
    assert {"serving_default", "serving_ids"} <= set(report.signatures)
    parts = 1 if task == "classification" else 2
    cut = (SEQ - 1 - parts) // parts
    expected, arrays = _python_logits(model, vocab, rows, task, cut)
    import tensorflow_text  # noqa: F401 (the in-graph tokenizer's ops)
    loaded = tf.saved_model.load(path)
    if task == "classification":
        out = loaded.signatures["serving_default"](text=tf.constant([a for a, _ in rows]))
    elif task == "multiple_choice":
        out = loaded.signatures["serving_default"](
            context=tf.constant([a for a, _ in rows]),
            choices=tf.constant([[b, a, b] for a, b in rows]))
    else:
        out = loaded.signatures["serving_default"](text_a=tf.constant([a for a, _ in rows]),
                                                   text_b=tf.constant([b for _, b in rows]))
    np.testing.assert_allclose(out["logits"].numpy(), expected, atol=1e-5, rtol=0)
    np.testing.assert_allclose(out["probabilities"].numpy().sum(-1), 1.0, rtol=1e-6)
    if labels:
        assert [x.decode() for x in out["labels"].numpy()] == \
            [labels[i] for i in expected.argmax(-1)]
    ids = loaded.signatures["serving_ids"](token_ids=tf.constant(arrays["token_ids"]))
    np.testing.assert_allclose(ids["logits"].numpy(), expected, atol=1e-5, rtol=0)


def test_bpe_model_exports_token_ids_and_passes_the_c_loader(vocab, rows, c_loader, tmp_path):
    """Without a WordPiece vocab (a BPE model) serving_default takes token ids; the C API loader
    (TF Serving's LoadSavedModel) gives Python's outputs for both kinds of export."""
    from bert_tf.export import loader_harness as lh
    from bert_tf.export.serving_compat import check_serving_compatibility
    from bert_tf.export.gpt import export_gpt_classifier_savedmodel
    model = _model(vocab, "similarity")
    ids_only = export_gpt_classifier_savedmodel(model, str(tmp_path / "ids"), 1, seq_length=SEQ)
    assert check_serving_compatibility(ids_only).ok
    text = export_gpt_classifier_savedmodel(model, str(tmp_path / "text"), 1, seq_length=SEQ,
                                            label_list=["no", "yes"], vocab_file=str(vocab))
    expected, arrays = _python_logits(model, vocab, rows, "similarity", (SEQ - 3) // 2)
    harness = _harness(c_loader)
    requests = [(ids_only, {"token_ids": arrays["token_ids"]}),
                (text, {"text_a": np.array([a for a, _ in rows], dtype=object),
                        "text_b": np.array([b for _, b in rows], dtype=object)})]
    for export_dir, request in requests:
        responses, proc = lh.run_signature(harness, export_dir, [request])
        assert proc.returncode == 0, proc.stderr[-3000:]
        (got,) = responses
        assert isinstance(got, dict), got
        np.testing.assert_allclose(got["logits"], expected, atol=1e-5, rtol=0)
        assert got["label_ids"].dtype == np.int32
    # A request of the wrong rank is an error the loader survives.
    responses, proc = lh.run_signature(harness, ids_only,
                                       [{"token_ids": arrays["token_ids"][:, 0]},
                                        {"token_ids": arrays["token_ids"]}])
    assert proc.returncode == 0
    assert isinstance(responses[0], str) and "compatible" in responses[0]
    np.testing.assert_allclose(responses[1]["logits"], expected, atol=1e-5, rtol=0)


@pytest.mark.long
def test_bpe_raw_text_signature_equals_the_python_encoder_path(rows, tmp_path):
    """The original BPE vocabulary: the raw-text signature encodes with InGraphBpeEncoder (chunk
    table built from the served texts) and gives the Python path's logits (TextEncoder)."""
    fixtures = pathlib.Path(os.environ.get(
        "BERT_TF_GPT_FIXTURES", PROJECT_ROOT.parent / "shared" / "fixtures" / "original_gpt"))
    encoders = sorted((fixtures / "bpe").glob("encoder_bpe_*.json"))
    merges = sorted((fixtures / "bpe").glob("vocab_*.bpe"))
    if not encoders or not merges:
        pytest.skip(f"needs the original BPE files in {fixtures / 'bpe'}")
    for module in ("ftfy", "spacy"):
        pytest.importorskip(module, reason=f"the BPE encoder needs {module} ([gpt] extra)")
    import keras
    from bert_tf.export.serving_compat import check_serving_compatibility
    from bert_tf.gpt.config import GptConfig
    from bert_tf.export.gpt import export_gpt_classifier_savedmodel
    from bert_tf.tasks.gpt_classifier import TaskRows, transform_rows
    from bert_tf.gpt.input_transforms import SpecialTokens
    from bert_tf.gpt.task_model import GptClassifier
    from bert_tf.tokenization.gpt_text_encoder import TextEncoder
    encoder = TextEncoder(encoders[0], merges[0])
    keras.utils.set_random_seed(5)
    config = GptConfig(n_vocab=len(encoder.encoder), n_special=3, n_ctx=64, n_embd=32,
                       n_head=2, n_layer=1)
    model = GptClassifier(config, task="entailment", num_classes=2, name="gpt_classifier")
    texts = [t for pair in rows for t in pair]
    path = export_gpt_classifier_savedmodel(model, str(tmp_path / "bpe"), 1, seq_length=SEQ,
                                            encoder_path=str(encoders[0]),
                                            bpe_path=str(merges[0]), bpe_corpus=texts)
    assert check_serving_compatibility(path).ok
    split = TaskRows("t", "rows", [list(r) for r in rows], None, np.zeros(len(rows), np.int32),
                     [])
    arrays = transform_rows(split, "entailment", encoder, SEQ, SpecialTokens.for_config(config),
                            (SEQ - 3) // 2)
    expected = model({"token_ids": arrays["token_ids"]}, training=False)["logits"].numpy()
    import tensorflow_text  # noqa: F401
    out = tf.saved_model.load(path).signatures["serving_default"](
        text_a=tf.constant([a for a, _ in rows]), text_b=tf.constant([b for _, b in rows]))
    np.testing.assert_allclose(out["logits"].numpy(), expected, atol=1e-5, rtol=0)


# ---------------------------------------------------------------------------------------------
# The export tool's GPT-1 types (tools/export_savedmodel.py --model_type=gpt_lm / gpt_classifier)
# on the tiny original GPT-1 fixture model: the SavedModels load back with the Python model's
# outputs within 1e-5, pass the serving checks, and bad flag combinations are one line naming
# the flag. The tool's library function (`bert_tf.cli.export_savedmodel.export`) runs in
# process; the slow test runs the tool itself as a user does.
# ---------------------------------------------------------------------------------------------
TOOL = str(PROJECT_ROOT / "tools" / "export_savedmodel.py")
TOOL_SEQ = 24
LABELS = ["no", "yes"]
PAIRS = [
    ("The cat sat on the mat.", "A cat was sitting on a mat."),
    ("Stocks fell sharply on Monday.", "Shares dropped a lot on Monday morning."),
    ("He plays the piano every evening.", "She never listens to music."),
    ("The weather is lovely today.", "It is raining heavily."),
    ("", "An empty first text."),
    (" ".join(["A very long sentence that the export must cut."] * 6), "Short."),
]


@pytest.fixture(scope="module")
def gpt(gpt_fixtures, gpt_fixture_json, tmp_path_factory):
    """The fixture model's files: its GPT config, its params folder, a WordPiece vocab of the
    test texts and a fine-tuned classifier checkpoint (model.ckpt-7, written as
    run_gpt_classifier.py writes them) of a similarity model on the fixture's params."""
    import keras

    from bert_tf.checkpoints.openai import load_original_params
    from bert_tf.gpt.task_model import GptClassifier
    from bert_tf.tokenization import BasicTokenizer
    from bert_tf.training.finetuning import write_checkpoint

    base = tmp_path_factory.mktemp("gpt_export_tool")
    config = fixture_config(gpt_fixture_json)
    config_file = base / "gpt_config.json"
    config.to_json_file(config_file)
    basic = BasicTokenizer(do_lower_case=True)
    tokens = sorted({t for pair in PAIRS for text in pair for t in basic.tokenize(text)})
    kept = [t for i, t in enumerate(tokens) if i % 5]  # some words left out: [UNK], ## pieces
    vocab = base / "vocab.txt"
    extra = [t for t in ("##s", "##e", "a", "e", "s", "t") if t not in kept]
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *kept, *extra]) + "\n",
                     encoding="utf-8")
    keras.utils.set_random_seed(3)
    model = GptClassifier(config, task="similarity", num_classes=2, name="gpt_classifier")
    load_original_params(model.transformer, gpt_fixtures / "model", n_transfer=config.n_layer)
    model.clf_w.assign(np.random.RandomState(4).normal(0, 0.5, model.clf_w.shape)
                       .astype(np.float32))
    model.clf_b.assign(np.array([0.1, -0.2], np.float32))
    run_dir = base / "gpt_classifier_run"
    write_checkpoint(model, str(run_dir), 7)
    return {"config": config, "config_file": str(config_file), "params": gpt_fixtures / "model",
            "vocab": str(vocab), "run_dir": str(run_dir), "classifier": model, "base": base}


def _python_lm(gpt, token_ids):
    """The Python LM's outputs, loaded as run_gpt_pretraining.py loads a params folder."""
    from bert_tf.checkpoints.openai import load_original_params
    from bert_tf.gpt.model import GptModel
    config = gpt["config"]
    model = GptModel(config, classifier=False)
    load_original_params(model, gpt["params"], n_transfer=config.n_layer)
    out = model({"token_ids": token_ids}, training=False)
    hidden = out["hidden_states"].numpy()
    table = model.embedding.we.numpy()[:config.n_vocab]
    return {"hidden_states": hidden, "lm_logits": out["lm_logits"].numpy(),
            "next_token_logits": tf.matmul(hidden[:, -1], table, transpose_b=True).numpy()}


def _python_classifier(gpt):
    """The fine-tuned model's logits on PAIRS, through the Python path (WordPiece encoder, the
    similarity transformation, texts cut to the export's budget) and the token ids."""
    from bert_tf.gpt.input_transforms import SpecialTokens
    from bert_tf.tasks.gpt_classifier import TaskRows, transform_rows
    from bert_tf.tokenization.gpt_text_encoder import WordPieceTextEncoder
    model = gpt["classifier"]
    rows = TaskRows("t", "test rows", [list(p) for p in PAIRS], None,
                    np.zeros(len(PAIRS), np.int32), [])
    arrays = transform_rows(rows, "similarity", WordPieceTextEncoder(gpt["vocab"]), TOOL_SEQ,
                            SpecialTokens.for_config(model.config), (TOOL_SEQ - 3) // 2)
    logits = model({"token_ids": arrays["token_ids"]}, training=False)["logits"].numpy()
    return logits, arrays["token_ids"]


def _token_ids(config):
    return np.random.RandomState(0).randint(0, config.n_vocab, size=(3, 17)).astype(np.int32)


def _check_lm(path, gpt):
    token_ids = _token_ids(gpt["config"])
    out = tf.saved_model.load(path).signatures["serving_default"](token_ids=tf.constant(token_ids))
    expected = _python_lm(gpt, token_ids)
    assert set(out) == set(expected)
    for key, value in expected.items():
        np.testing.assert_allclose(out[key].numpy(), value, atol=1e-5, rtol=0, err_msg=key)
    return expected, token_ids


def _check_classifier(path, gpt):
    import tensorflow_text  # noqa: F401 (the in-graph tokenizer's ops)
    expected, token_ids = _python_classifier(gpt)
    loaded = tf.saved_model.load(path)
    assert {"serving_default", "serving_ids"} <= set(loaded.signatures)
    out = loaded.signatures["serving_default"](text_a=tf.constant([a for a, _ in PAIRS]),
                                               text_b=tf.constant([b for _, b in PAIRS]))
    np.testing.assert_allclose(out["logits"].numpy(), expected, atol=1e-5, rtol=0)
    assert [x.decode() for x in out["labels"].numpy()] == [LABELS[i] for i in expected.argmax(-1)]
    ids = loaded.signatures["serving_ids"](token_ids=tf.constant(token_ids))
    np.testing.assert_allclose(ids["logits"].numpy(), expected, atol=1e-5, rtol=0)
    return expected, token_ids


def _lm_flags(gpt, export_dir, init_checkpoint=None):
    return {"model_type": "gpt_lm", "export_dir": str(export_dir),
            "gpt_config_file": gpt["config_file"],
            "init_checkpoint": str(init_checkpoint or gpt["params"])}


def _classifier_flags(gpt, export_dir):
    return {"model_type": "gpt_classifier", "export_dir": str(export_dir),
            "gpt_config_file": gpt["config_file"], "gpt_task": "similarity",
            "init_checkpoint": gpt["run_dir"], "vocab_file": gpt["vocab"],
            "seq_length": TOOL_SEQ, "label_list": LABELS}


def _export(**flags):
    from bert_tf.cli.export_savedmodel import export
    from bert_tf.export.exporter import ExportOptions
    return export(ExportOptions(**flags))


@pytest.mark.gpt_fixtures
def test_gpt_lm_export(gpt, c_loader, tmp_path):
    """From the params folder and from a pretraining --output_dir (its original_params/): the
    same SavedModel outputs as the Python LM; servable; the C loader gives the same numbers."""
    from bert_tf.export import loader_harness as lh
    from bert_tf.export.exporter import ExportOptions, build_export_module, validate_options
    from bert_tf.export.serving_compat import check_serving_compatibility
    path = _export(**_lm_flags(gpt, tmp_path / "lm"))
    assert path == str(tmp_path / "lm" / "1")
    report = check_serving_compatibility(path)
    assert report.ok, report.problems
    assert {name for name in report.signatures if not name.startswith("__")} == {
        "serving_default"}
    expected, token_ids = _check_lm(path, gpt)

    # A run_gpt_pretraining.py --output_dir: its original_params/ (built, not written again).
    run_dir = tmp_path / "pretraining_run"
    shutil.copytree(gpt["params"], run_dir / "original_params")
    opts = ExportOptions(**_lm_flags(gpt, tmp_path / "lm_from_run", init_checkpoint=run_dir))
    validate_options(opts)
    module, _ = build_export_module(opts)
    saved = tf.saved_model.load(path)
    assert len(module.model_variables) == len(saved.model_variables)
    for built, loaded in zip(module.model_variables, saved.model_variables):
        np.testing.assert_array_equal(built.numpy(), loaded.numpy(), err_msg=built.name)

    responses, proc = lh.run_signature(_harness(c_loader), path, [{"token_ids": token_ids}])
    assert proc.returncode == 0, proc.stderr[-3000:]
    (got,) = responses
    assert isinstance(got, dict), got
    for key, value in expected.items():
        np.testing.assert_allclose(got[key], value, atol=1e-5, rtol=0, err_msg=key)


@pytest.mark.long
@pytest.mark.gpt_fixtures
def test_gpt_classifier_export(gpt, c_loader, tmp_path):
    """The fine-tuned checkpoint (its run's --output_dir) -> raw-text and id signatures with the
    Python path's logits; servable; the C loader (with the tensorflow-text kernels) agrees on
    the raw-text signature."""
    from bert_tf.export import loader_harness as lh
    from bert_tf.export.serving_compat import check_serving_compatibility
    path = _export(**_classifier_flags(gpt, tmp_path / "clf"))
    report = check_serving_compatibility(path)
    assert report.ok, report.problems
    expected, _ = _check_classifier(path, gpt)
    request = {"text_a": np.array([a for a, _ in PAIRS], dtype=object),
               "text_b": np.array([b for _, b in PAIRS], dtype=object)}
    responses, proc = lh.run_signature(_harness(c_loader), path, [request])
    assert proc.returncode == 0, proc.stderr[-3000:]
    (got,) = responses
    assert isinstance(got, dict), got
    np.testing.assert_allclose(got["logits"], expected, atol=1e-5, rtol=0)
    assert got["label_ids"].dtype == np.int32
    assert [x.decode() for x in got["labels"]] == [LABELS[i] for i in expected.argmax(-1)]


@pytest.mark.gpt_fixtures
def test_untrained_head_from_the_params_folder(gpt):
    """--allow_untrained_head with a params folder: the transformer holds the params, as a
    fine-tuning run initialised from them (no export written: the module is enough)."""
    from bert_tf.export.exporter import ExportOptions, build_export_module, validate_options
    flags = {**_classifier_flags(gpt, gpt["base"] / "never"), "allow_untrained_head": True,
             "init_checkpoint": str(gpt["params"]), "vocab_file": None, "label_list": None,
             "num_labels": 1}
    opts = ExportOptions(**flags)
    validate_options(opts)
    module, signatures = build_export_module(opts)
    assert set(signatures) == {"serving_ids", "serving_default"}
    model = module._model
    assert model.regression and model.num_classes == 1
    transformer = dict(model.transformer.original_variables())
    fine_tuned = dict(gpt["classifier"].transformer.original_variables())
    for name, variable in fine_tuned.items():
        np.testing.assert_array_equal(transformer[name].numpy(), variable.numpy(), err_msg=name)


def _bad(gpt, tmp_path, **changes):
    """The flags of a classifier export with `changes` (None removes a flag)."""
    flags = {**_classifier_flags(gpt, tmp_path / "never"), **changes}
    return {k: v for k, v in flags.items() if v is not None}


@pytest.mark.parametrize("changes, message", [
    ({"gpt_config_file": None}, "--gpt_config_file is required for --model_type=gpt_classifier"),
    ({"gpt_task": None}, "--gpt_task is required"),
    ({"gpt_task": "regression"}, "--gpt_task must be one of"),
    ({"bert_config_file": "bert_config.json"}, "--bert_config_file does not apply to "
                                               "--model_type=gpt_classifier"),
    ({"encoder_path": "encoder_bpe_40000.json"}, "--vocab_file (WordPiece) and "
                                                 "--encoder_path/--bpe_path (BPE)"),
    ({"vocab_file": None, "encoder_path": "encoder_bpe_40000.json"},
     "--encoder_path and --bpe_path go together"),
    ({"bpe_corpus_file": "texts.txt"}, "--bpe_corpus_file goes with --encoder_path"),
    ({"seq_length": 40}, "--seq_length must be in [3, n_ctx=32]"),
    ({"max_text_length": -1}, "--max_text_length must be >= 0"),
    ({"label_list": None}, "--num_labels or --label_list is required"),
    ({"num_labels": 3}, "--label_list has 2 labels but --num_labels=3"),
    ({"gpt_task": "multiple_choice"}, "--label_list does not apply to "
                                      "--model_type=gpt_classifier"),
    ({"init_checkpoint": None}, "--init_checkpoint (the fine-tuned checkpoint) is required"),
    ({"init_checkpoint": "PARAMS"}, "holds pretrained GPT-1 params, no classifier head"),
    ({"model_type": "gpt_lm", "label_list": None, "seq_length": 128},
     "--gpt_task does not apply to --model_type=gpt_lm"),
    ({"model_type": "gpt_lm", "gpt_task": None, "label_list": None},
     "--vocab_file does not apply to --model_type=gpt_lm"),
    ({"model_type": "gpt_lm", "gpt_task": None, "vocab_file": None, "label_list": None,
      "init_checkpoint": "RUN"}, "neither an OpenAI-layout GPT-1 params folder"),
    ({"model_type": "classifier", "bert_config_file": "CONFIG"},
     "--gpt_config_file does not apply to --model_type=classifier"),
])
@pytest.mark.gpt_fixtures
def test_bad_flag_combinations_name_the_flag(gpt, tmp_path, changes, message):
    """Checked before any TensorFlow work: an ExportError (a UserInputError) naming the flag."""
    from bert_tf.errors import UserInputError
    from bert_tf.export.exporter import ExportOptions, validate_options
    places = {"PARAMS": str(gpt["params"]), "RUN": gpt["run_dir"], "CONFIG": gpt["config_file"]}
    flags = {k: places.get(v, v) if isinstance(v, str) else v
             for k, v in _bad(gpt, tmp_path, **changes).items()}
    with pytest.raises(UserInputError) as raised:
        validate_options(ExportOptions(**flags))
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_gpt_tasks_are_the_model_tasks():
    from bert_tf.export.exporter import GPT_TASKS
    from bert_tf.gpt.task_model import TASKS
    assert GPT_TASKS == TASKS


def _run_tool(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True, env=env,
                          cwd=PROJECT_ROOT, timeout=600)


def _as_args(flags: dict) -> list[str]:
    return [f"--{k}={','.join(v) if isinstance(v, list) else v}" for k, v in flags.items()]


@pytest.mark.gpt_fixtures
@pytest.mark.slow  # three tool processes, each importing TensorFlow
def test_the_tool_exports_both_gpt_types(gpt, tmp_path):
    lm = _run_tool(*_as_args(_lm_flags(gpt, tmp_path / "lm")), "--version=3")
    assert lm.returncode == 0, lm.stderr[-3000:]
    assert lm.stdout.strip().endswith(os.path.join("lm", "3"))
    _check_lm(str(tmp_path / "lm" / "3"), gpt)

    clf = _run_tool(*_as_args(_classifier_flags(gpt, tmp_path / "clf")))
    assert clf.returncode == 0, clf.stderr[-3000:]
    _check_classifier(str(tmp_path / "clf" / "1"), gpt)

    bad = _run_tool(*_as_args({**_lm_flags(gpt, tmp_path / "bad"), "gpt_task": "similarity"}))
    assert bad.returncode == 1
    assert bad.stderr.strip().splitlines()[-1] == (
        "error: --gpt_task does not apply to --model_type=gpt_lm (the LM has no task head "
        "and takes token ids)")
    assert not (tmp_path / "bad").exists()
