"""Every file the library reads or writes goes through bert_tf.io_utils / tf.io.gfile: Cloud
Storage users keep config, vocab, checkpoints, data and outputs under gs://. TensorFlow's
in-memory file system `ram://` stands in for gs:// (no network): it is per-process, so the runs
here are in-process. A scheme TensorFlow cannot open is a clear error, never a local folder."""
from __future__ import annotations

import gzip
import os
import uuid

import pytest

from bert_tf import io_utils
from bert_tf.errors import UserInputError

MRPC_TRAIN_ROWS = 17  # header + 16 real MRPC rows
MRPC_DEV_ROWS = 9     # header + 8


def _ram_root() -> str:
    return f"ram://bert_tf_test_{uuid.uuid4().hex[:8]}"


def _copy_to(src: str, dst: str) -> None:
    import tensorflow as tf

    tf.io.gfile.makedirs(os.path.dirname(dst) if "://" not in dst else dst.rsplit("/", 1)[0])
    tf.io.gfile.copy(src, dst, overwrite=True)


def _write(path: str, text: str) -> None:
    import tensorflow as tf

    tf.io.gfile.makedirs(path.rsplit("/", 1)[0])
    with tf.io.gfile.GFile(path, "w") as f:
        f.write(text)


def _read(path: str) -> str:
    import tensorflow as tf

    with tf.io.gfile.GFile(path, "r") as f:
        return f.read()


def _mrpc_rows(shared_data, name: str, n: int) -> str:
    with open(shared_data / "glue" / "MRPC" / name, encoding="utf-8") as f:
        return "".join(f.readline() for _ in range(n))


# ---------------------------------------------------------------------------------------------
# io_utils itself
# ---------------------------------------------------------------------------------------------
def test_io_utils_on_ram_filesystem():
    root = _ram_root()
    path = f"{root}/a/b/x.txt"
    io_utils.atomic_write_text(path, "h\u00e9llo\r\nworld\n")
    assert io_utils.exists(path) and io_utils.isfile(path) and io_utils.isdir(f"{root}/a/b")
    assert io_utils.listdir(f"{root}/a/b") == ["x.txt"]  # no temporary file left
    with io_utils.open_file(path, newline="") as f:  # Python's open() semantics
        assert list(f) == ["h\u00e9llo\r\n", "world\n"]
    assert io_utils.read_text(path) == "h\u00e9llo\nworld\n"
    io_utils.atomic_write_bytes(f"{root}/a/z.gz", gzip.compress(b"zipped\n"))
    with gzip.GzipFile(fileobj=io_utils.open_file(f"{root}/a/z.gz", "rb")) as f:
        assert f.read() == b"zipped\n"
    assert io_utils.glob(f"{root}/a/*") == [f"{root}/a/b", f"{root}/a/z.gz"]
    with pytest.raises(FileNotFoundError, match="nothing.txt"):
        io_utils.open_file(f"{root}/nothing.txt")
    with pytest.raises(RuntimeError, match="boom"):
        with io_utils.atomic_output_path(path) as tmp:
            with io_utils.open_file(tmp, "w") as f:
                f.write("half")
            raise RuntimeError("boom")
    assert io_utils.read_text(path) == "h\u00e9llo\nworld\n"  # untouched
    assert io_utils.listdir(f"{root}/a/b") == ["x.txt"]  # temp removed


def test_unregistered_scheme_is_a_clear_error_not_a_local_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(io_utils.UnsupportedFileSystemError,
                       match=r"--output_dir=s3://bucket/x: this TensorFlow cannot open 's3://'"):
        io_utils.check_path("s3://bucket/x", "--output_dir")
    with pytest.raises(UserInputError, match="s3://"):
        io_utils.makedirs("s3://bucket/x")
    assert isinstance(io_utils.UnsupportedFileSystemError("x"), UserInputError)
    assert os.listdir(tmp_path) == []  # no folder named "s3:" appeared
    io_utils.check_path("ram://fine/x", "--output_dir")  # registered schemes pass
    io_utils.check_path(str(tmp_path / "local"), "--output_dir")


def test_run_classifier_rejects_unknown_scheme_before_writing(tmp_path, monkeypatch,
                                                              original_fixtures):
    from bert_tf.tasks.classifier import ClassifierRunOptions, run_classifier

    monkeypatch.chdir(tmp_path)
    ckpt = original_fixtures / "checkpoint"
    opts = ClassifierRunOptions(
        task_name="MRPC", data_dir=str(tmp_path), bert_config_file=str(ckpt / "bert_config.json"),
        vocab_file=str(original_fixtures / "vocab_uncased.txt"), output_dir="nosuchfs://bucket/x",
        do_eval=True)
    with pytest.raises(UserInputError, match="--output_dir=nosuchfs://bucket/x"):
        run_classifier(opts)
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------------------------------------
# run_classifier end to end with every path under ram://
# ---------------------------------------------------------------------------------------------
def _classifier_run(original_fixtures, shared_data, root: str) -> tuple[dict, dict]:
    """Config, vocab, init checkpoint, GLUE data and output_dir all under `root` (ram:// or a
    local folder); trains 2 steps on 16 real MRPC rows, evaluates 8, predicts 8."""
    from bert_tf.tasks.classifier import ClassifierRunOptions, run_classifier

    ckpt = original_fixtures / "checkpoint"
    model_dir = f"{root}/model"
    _copy_to(str(ckpt / "bert_config.json"), f"{model_dir}/bert_config.json")
    _copy_to(str(original_fixtures / "vocab_uncased.txt"), f"{model_dir}/vocab.txt")
    for suffix in (".index", ".data-00000-of-00001"):
        _copy_to(str(ckpt / f"bert_model.ckpt{suffix}"), f"{model_dir}/bert_model.ckpt{suffix}")
    data_dir = f"{root}/glue/MRPC"
    _write(f"{data_dir}/train.tsv", _mrpc_rows(shared_data, "train.tsv", MRPC_TRAIN_ROWS))
    _write(f"{data_dir}/dev.tsv", _mrpc_rows(shared_data, "dev.tsv", MRPC_DEV_ROWS))
    _write(f"{data_dir}/test.tsv", _mrpc_rows(shared_data, "test.tsv", MRPC_DEV_ROWS))
    output_dir = f"{root}/out"
    opts = ClassifierRunOptions(
        task_name="MRPC", data_dir=data_dir, bert_config_file=f"{model_dir}/bert_config.json",
        vocab_file=f"{model_dir}/vocab.txt", init_checkpoint=f"{model_dir}/bert_model.ckpt",
        output_dir=output_dir, do_train=True, do_eval=True, do_predict=True, max_seq_length=32,
        train_batch_size=8, eval_batch_size=8, predict_batch_size=8, learning_rate=2e-5,
        num_train_epochs=1.0, save_checkpoints_steps=1)
    result = run_classifier(opts)
    import tensorflow as tf

    files = {name: _read(f"{output_dir}/{name}") for name in tf.io.gfile.listdir(output_dir)
             if name.endswith((".txt", ".tsv")) or name == "checkpoint"}
    return result, files


@pytest.mark.long
def test_run_classifier_with_every_path_in_ram(tmp_path, monkeypatch, original_fixtures,
                                               shared_data):
    import tensorflow as tf

    monkeypatch.chdir(tmp_path)  # a stray local write would land here
    root = _ram_root()
    ram_result, ram_files = _classifier_run(original_fixtures, shared_data, root)
    assert os.listdir(tmp_path) == [], "something was written to a local folder"
    out = f"{root}/out"
    names = set(tf.io.gfile.listdir(out))
    assert {"eval_results.txt", "test_results.tsv", "MRPC.tsv", "checkpoint",
            "model.ckpt-2.index"} <= names, names
    assert not [n for n in names if n.startswith(".") or n.endswith(".tmp")], names
    assert tf.train.latest_checkpoint(out) == f"{out}/model.ckpt-2"
    assert int(tf.compat.v1.train.NewCheckpointReader(f"{out}/model.ckpt-2").get_tensor("global_step")) == 2
    assert "global_step = 2" in ram_files["eval_results.txt"]
    assert len(ram_files["test_results.tsv"].splitlines()) == MRPC_DEV_ROWS - 1

    # The same run on local paths gives the same files (same seed, same rows).
    local_result, local_files = _classifier_run(original_fixtures, shared_data,
                                                str(tmp_path / "local"))
    assert ram_result["train"]["loss"] == local_result["train"]["loss"]
    for name in ("eval_results.txt", "test_results.tsv", "MRPC.tsv"):
        assert ram_files[name] == local_files[name], name

    # Without training: the latest checkpoint in the ram:// output_dir is picked up.
    from bert_tf.tasks.classifier import ClassifierRunOptions, run_classifier

    again = run_classifier(ClassifierRunOptions(
        task_name="MRPC", data_dir=f"{root}/glue/MRPC", bert_config_file=f"{root}/model/bert_config.json",
        vocab_file=f"{root}/model/vocab.txt", output_dir=out, do_eval=True, max_seq_length=32,
        eval_batch_size=8))
    assert again["eval"]["dev"] == ram_result["eval"]["dev"]


@pytest.mark.long
def test_encoder_export_to_ram_and_back(original_fixtures):
    """A SavedModel export to a remote file system: written beside, moved in (saved_model.pb
    last), loadable from there; a second export without overwrite is refused."""
    import numpy as np
    import tensorflow as tf

    from bert_tf.checkpoints import load_original_checkpoint
    from bert_tf.export.encoder import export_encoder_savedmodel
    from bert_tf.export.savedmodel_io import ExportError
    from bert_tf.modeling import BertConfig, BertEncoder

    ckpt = original_fixtures / "checkpoint"
    encoder = BertEncoder(BertConfig.from_json_file(str(ckpt / "bert_config.json")))
    encoder.build_from_config_shapes()
    load_original_checkpoint(encoder, str(ckpt / "bert_model.ckpt"))
    root = _ram_root()
    target = f"{root}/exports/encoder"
    assert export_encoder_savedmodel(encoder, target) == target
    assert io_utils.exists(f"{target}/saved_model.pb")
    assert [p for p in io_utils.glob(f"{root}/exports/*") if ".tmp-" in p] == []
    ids = tf.constant([[101, 7592, 2088, 102]], tf.int32)
    inputs = {"input_word_ids": ids, "input_mask": tf.ones_like(ids),
              "input_type_ids": tf.zeros_like(ids)}
    loaded = tf.saved_model.load(target)
    np.testing.assert_allclose(loaded(inputs)["pooled_output"].numpy(),
                               encoder(inputs)["pooled_output"].numpy(), atol=1e-5)
    with pytest.raises(ExportError, match="already exists"):
        export_encoder_savedmodel(encoder, target)


@pytest.mark.long
def test_pretraining_chain_in_ram(tmp_path, monkeypatch, original_fixtures, shared_data):
    """Pretraining data generation -> run_pretraining -> run_classifier from the pretraining
    checkpoint -> encoder export, every path under ram:// and nothing written locally."""
    import tensorflow as tf

    from bert_tf.pretraining_data import PretrainingDataOptions, create_pretraining_data
    from bert_tf.tasks.classifier import ClassifierRunOptions, run_classifier
    from bert_tf.tokenization import FullTokenizer
    from bert_tf.runs.bert_pretraining import PretrainingRun, run_pretraining

    monkeypatch.chdir(tmp_path)
    root = _ram_root()
    ckpt = original_fixtures / "checkpoint"
    _copy_to(str(ckpt / "bert_config.json"), f"{root}/model/bert_config.json")
    _copy_to(str(original_fixtures / "vocab_uncased.txt"), f"{root}/model/vocab.txt")
    _copy_to(str(original_fixtures / "sample_text.txt"), f"{root}/corpus/sample_text.txt")
    tokenizer = FullTokenizer(f"{root}/model/vocab.txt", do_lower_case=True)
    create_pretraining_data(f"{root}/corpus/sample_text.txt", f"{root}/data/tf_examples.tfrecord",
                            tokenizer, PretrainingDataOptions(dupe_factor=2), log_examples=0)
    result = run_pretraining(PretrainingRun(
        bert_config_file=f"{root}/model/bert_config.json",
        input_file=f"{root}/data/tf_examples.tfrecord", output_dir=f"{root}/pretraining_output",
        do_train=True, do_eval=True, train_batch_size=8, eval_batch_size=8, num_train_steps=3,
        num_warmup_steps=1, save_checkpoints_steps=3, iterations_per_loop=3, max_eval_steps=2,
        export_dir=f"{root}/export/encoder", plot_curves=False))
    assert result
    pretraining_out = tf.io.gfile.listdir(f"{root}/pretraining_output")
    assert "eval_results.txt" in pretraining_out, pretraining_out
    final = tf.train.latest_checkpoint(f"{root}/pretraining_output")
    assert final is not None
    _write(f"{root}/glue/MRPC/train.tsv", _mrpc_rows(shared_data, "train.tsv", MRPC_TRAIN_ROWS))
    _write(f"{root}/glue/MRPC/dev.tsv", _mrpc_rows(shared_data, "dev.tsv", MRPC_DEV_ROWS))
    run = run_classifier(ClassifierRunOptions(
        task_name="MRPC", data_dir=f"{root}/glue/MRPC",
        bert_config_file=f"{root}/model/bert_config.json", vocab_file=f"{root}/model/vocab.txt",
        init_checkpoint=final, output_dir=f"{root}/mrpc_output", do_train=True, do_eval=True,
        max_seq_length=32, train_batch_size=8, eval_batch_size=8, num_train_epochs=1.0))
    assert run["eval"]["dev"]["global_step"] == 2
    assert io_utils.exists(f"{root}/export/encoder/saved_model.pb")
    assert os.listdir(tmp_path) == [], "something was written to a local folder"


def test_tpu_run_with_local_output_dir_is_an_early_error(tmp_path, original_fixtures,
                                                          shared_data):
    """As the original: with --use_tpu the output must be on Cloud Storage; a local path is one
    line naming --output_dir, before the TPU is resolved or anything is written."""
    from bert_tf.tasks.classifier import ClassifierRunOptions, run_classifier

    ckpt = original_fixtures / "checkpoint"
    out = tmp_path / "mrpc_output"
    with pytest.raises(UserInputError, match=r"--output_dir=.*mrpc_output is not a gs:// path"):
        run_classifier(ClassifierRunOptions(
            task_name="MRPC", data_dir=str(shared_data / "glue" / "MRPC"),
            bert_config_file=str(ckpt / "bert_config.json"),
            vocab_file=str(original_fixtures / "vocab_uncased.txt"), output_dir=str(out),
            do_train=True, use_tpu=True, tpu_name="some-tpu"))
    assert not out.exists()
