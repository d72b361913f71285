"""tools/run_classifier.py as real processes with the published Chinese config (its extra fields
directionality and pooler_* kept and written back) and with --bert_hub_module_handle alone (the
module carries the config and vocab: no --bert_config_file / --vocab_file)."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]
RUN_CLASSIFIER = PROJECT_ROOT / "tools" / "run_classifier.py"
EXPORT = PROJECT_ROOT / "tools" / "export_savedmodel.py"
CHINESE_CONFIG = PROJECT_ROOT / "official_configs" / "models" / "chinese_L-12_H-768_A-12.json"
EXTRA_FIELDS = ("directionality", "pooler_fc_size", "pooler_num_attention_heads",
                "pooler_num_fc_layers", "pooler_size_per_head", "pooler_type")

# A few rows of Chinese review text (SST-2 layout: sentence, label 1 = positive).
POSITIVE = ["这部电影非常好看", "演员的表演很精彩", "故事感人，我很喜欢", "音乐优美，画面漂亮",
            "这是今年最好的电影", "导演拍得很用心", "看完心情很好", "值得推荐给朋友"]
NEGATIVE = ["这部电影太无聊了", "演员的表演很差", "故事混乱，我不喜欢", "音乐难听，画面粗糙",
            "这是今年最差的电影", "导演拍得很随便", "看完心情很糟", "不值得浪费时间"]


def _tiny_chinese_model(folder: pathlib.Path) -> tuple[str, str, dict]:
    """The published Chinese config, tiny-sized (all its other fields, extra ones included,
    kept; dropout 0.1 as published) and a vocab of the special tokens + the data's characters."""
    folder.mkdir(parents=True, exist_ok=True)
    chars = sorted({c for s in POSITIVE + NEGATIVE for c in s if not c.isspace()})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars]
    (folder / "vocab.txt").write_text("".join(t + "\n" for t in vocab), encoding="utf-8")
    config = json.loads(CHINESE_CONFIG.read_text(encoding="utf-8"))
    assert set(EXTRA_FIELDS) <= set(config)
    config.update(hidden_size=32, intermediate_size=64, num_attention_heads=2,
                  num_hidden_layers=2, max_position_embeddings=64, vocab_size=len(vocab),
                  pooler_fc_size=32, pooler_num_attention_heads=2)
    (folder / "bert_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    return str(folder / "bert_config.json"), str(folder / "vocab.txt"), config


def _write_task(data_dir: pathlib.Path) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    rows = [(s, "1") for s in POSITIVE] + [(s, "0") for s in NEGATIVE]
    train = rows[0::2] + rows[1::2]
    (data_dir / "train.tsv").write_text(
        "sentence\tlabel\n" + "".join(f"{s}\t{l}\n" for s, l in train), encoding="utf-8")
    (data_dir / "dev.tsv").write_text(
        "sentence\tlabel\n" + "".join(f"{s}\t{l}\n" for s, l in rows[::3]), encoding="utf-8")
    test = rows[1::3]
    (data_dir / "test.tsv").write_text(
        "index\tsentence\n" + "".join(f"{i}\t{s}\n" for i, (s, _) in enumerate(test)),
        encoding="utf-8")


def _run(script: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(PROJECT_ROOT))
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True,
                          cwd=PROJECT_ROOT, env=env, timeout=600)


def _error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("error:")]


TASK_FLAGS = ("--task_name=SST-2", "--max_seq_length=24", "--train_batch_size=4",
              "--eval_batch_size=3", "--predict_batch_size=3", "--learning_rate=1e-3",
              "--num_train_epochs=3", "--save_checkpoints_steps=1000", "--plot_curves=false")


def test_no_model_and_no_hub_module_is_one_error_line(tmp_path):
    _write_task(tmp_path / "data")
    proc = _run(RUN_CLASSIFIER, "--do_train=true", f"--data_dir={tmp_path / 'data'}",
                f"--output_dir={tmp_path / 'out'}", *TASK_FLAGS)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    errors = _error_lines(proc)
    assert len(errors) == 1, proc.stderr[-2000:]
    assert "--bert_config_file" in errors[0] and "--bert_hub_module_handle" in errors[0]
    assert not (tmp_path / "out").exists()  # nothing written before the error


@pytest.mark.slow
def test_chinese_config_trains_predicts_and_keeps_its_extra_fields(tmp_path):
    config_file, vocab_file, config = _tiny_chinese_model(tmp_path / "chinese_tiny")
    _write_task(tmp_path / "data")
    out = tmp_path / "out"
    proc = _run(RUN_CLASSIFIER, f"--bert_config_file={config_file}", f"--vocab_file={vocab_file}",
                "--do_lower_case=true", "--do_train=true", "--do_eval=true", "--do_predict=true",
                f"--data_dir={tmp_path / 'data'}", f"--output_dir={out}", *TASK_FLAGS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # One warning names the kept fields (the original accepts any extra key).
    assert "directionality" in proc.stderr and "pooler_type" in proc.stderr
    results = dict(line.split(" = ") for line in
                   (out / "eval_results.txt").read_text().splitlines())
    assert int(results["global_step"]) == int(16 / 4 * 3)
    assert 0.0 <= float(results["eval_accuracy"]) <= 1.0
    test_rows = (out / "test_results.tsv").read_text().splitlines()
    assert len(test_rows) == 5  # rows[1::3] of the 16
    probabilities = [[float(x) for x in row.split("\t")] for row in test_rows]
    assert all(len(p) == 2 and abs(sum(p) - 1.0) < 1e-5 for p in probabilities)
    # The trained classifier exported: its SavedModel carries the config with the extra fields.
    export_dir = tmp_path / "export"
    proc = _run(EXPORT, "--model_type=classifier", f"--export_dir={export_dir}",
                f"--bert_config_file={config_file}", f"--vocab_file={vocab_file}",
                f"--init_checkpoint={out}", "--num_labels=2", "--seq_length=24")
    assert proc.returncode == 0, proc.stderr[-3000:]
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 (registers the raw-text signature's ops)

    loaded = tf.saved_model.load(str(export_dir / "1"))
    exported = json.loads(loaded.bert_config_json.numpy().decode("utf-8"))
    assert {k: exported[k] for k in EXTRA_FIELDS} == {k: config[k] for k in EXTRA_FIELDS}
    assert exported == config


@pytest.mark.slow
def test_hub_module_handle_alone_trains_and_predicts(tmp_path):
    """The tiny Chinese encoder exported with its vocab is the module: no --bert_config_file,
    --vocab_file or --init_checkpoint; the config written to output_dir keeps the extra fields."""
    import keras

    from bert_tf.export.encoder import export_encoder_savedmodel
    from bert_tf.modeling import BertConfig, BertEncoder

    config_file, vocab_file, config = _tiny_chinese_model(tmp_path / "chinese_tiny")
    keras.utils.set_random_seed(1)
    encoder = BertEncoder(BertConfig.from_json_file(config_file))
    encoder.build_from_config_shapes()
    module = tmp_path / "hub_module"
    export_encoder_savedmodel(encoder, str(module), vocab_file=vocab_file, do_lower_case=True)
    _write_task(tmp_path / "data")
    out = tmp_path / "out"
    proc = _run(RUN_CLASSIFIER, f"--bert_hub_module_handle={module}", "--do_train=true",
                "--do_eval=true", "--do_predict=true", f"--data_dir={tmp_path / 'data'}",
                f"--output_dir={out}", *TASK_FLAGS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "eval_results.txt").exists() and (out / "test_results.tsv").exists()
    assert json.loads((out / "bert_config.json").read_text()) == config


def test_no_data_dir_and_no_tfds_data_dir_is_named(tmp_path):
    """--data_dir is not a required flag (--tfds_data_dir replaces it); giving neither is one
    UserInputError naming both, before anything is written."""
    from bert_tf.errors import UserInputError
    from bert_tf.tasks.classifier import ClassifierRunOptions, run_classifier

    config_file, vocab_file, _ = _tiny_chinese_model(tmp_path / "chinese_tiny")
    with pytest.raises(UserInputError, match=r"--data_dir .* or --tfds_data_dir is required"):
        run_classifier(ClassifierRunOptions(
            bert_config_file=config_file, vocab_file=vocab_file, task_name="sst-2",
            output_dir=str(tmp_path / "out"), do_train=True))
    assert not (tmp_path / "out").exists()
