"""GPT-1 classifier SavedModels: raw text in (in-graph WordPiece + the paper's transformations),
the same serving checks as BERT's exports (op allowlist, dense outputs; TF Serving's C loader
with the tensorflow-text kernels), and the same numbers as the Python path."""
from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest
import tensorflow as tf

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]
GLUE = pathlib.Path(os.environ.get("BERT_TF_DATA",
                                  PROJECT_ROOT.parent / "shared" / "data")) / "glue"
SEQ = 48


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


def test_bpe_model_exports_token_ids_and_passes_the_c_loader(vocab, rows, tmp_path):
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
    try:
        harness = lh.build_harness(tmp_path / "harness")
    except lh.HarnessUnavailable as e:
        pytest.skip(f"cannot build the C loader harness: {e}")
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
