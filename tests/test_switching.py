"""The original README's commands (docs/switching.md, verbatim but for paths) run against bert_tf
on tiny real data: the original release's fixture model, a few GLUE MRPC rows, a few SQuAD
questions, sample_text.txt. The TPU ones must stop at the TPU resolver with one clear line (no
TPU here). The commands are read from docs/switching.md, so the page and the test cannot drift.
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "switching.md"
_BLOCK = re.compile(r"<!-- command: (\S+) \| expect: (\S+)(?: \| files: ([^>]*?))? -->\s*"
                    r"```shell\n(.*?)```", re.S)


def readme_commands() -> list[tuple[str, str, list[str], str]]:
    """(name, expectation, output files, command text) of every marked block, in page order."""
    return [(m.group(1), m.group(2), (m.group(3) or "").split(), m.group(4))
            for m in _BLOCK.finditer(DOC.read_text(encoding="utf-8"))]


def test_doc_lists_the_readme_commands():
    names = [c[0] for c in readme_commands()]
    assert names == ["create_pretraining_data", "run_pretraining", "run_classifier_mrpc",
                     "run_classifier_predict", "run_classifier_tpu", "run_squad_v1",
                     "evaluate_v1", "run_squad_v1_tpu", "run_squad_v2_tpu",
                     "run_squad_v2_threshold_tpu", "extract_features"]


def _substitute_paths(command: str, tmp: pathlib.Path) -> str:
    """Only paths change: the scripts' folder, /tmp and the README's ./squad/ output folder.
    /tmp is replaced first: the project or the interpreter may themselves live under /tmp."""
    command = command.replace("./squad/", "/tmp/squad_base/").replace("/tmp/", f"{tmp}/")
    command = re.sub(r"python \$SQUAD_DIR/evaluate-v(1\.1|2\.0)\.py",
                     f"{sys.executable} {ROOT}/tools/evaluate_squad.py", command)
    return re.sub(r"python (\w+)\.py", lambda m: f"{sys.executable} {ROOT}/tools/{m.group(1)}.py",
                  command)


def _squad_subset(source: pathlib.Path, target: pathlib.Path, paragraphs: slice,
                  training: bool = False) -> None:
    """Paragraphs of the first article; a training file keeps one answer per question (as
    train-v1.1.json / train-v2.0.json have)."""
    data = json.loads(source.read_text(encoding="utf-8"))
    article = dict(data["data"][0])
    article["paragraphs"] = article["paragraphs"][paragraphs]
    if training:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                qa["answers"] = qa["answers"][:1]
    target.write_text(json.dumps({"version": data.get("version", "1.1"), "data": [article]}),
                      encoding="utf-8")


@pytest.fixture(scope="module")
def readme_env(tmp_path_factory, original_fixtures, shared_data):
    """$BERT_BASE_DIR, $BERT_LARGE_DIR, $GLUE_DIR, $SQUAD_DIR, ... with tiny real data."""
    tmp = tmp_path_factory.mktemp("readme")
    model = tmp / "uncased_L-2_H-128_A-2"
    model.mkdir()
    ckpt = original_fixtures / "checkpoint"
    shutil.copy(ckpt / "bert_config.json", model / "bert_config.json")
    shutil.copy(original_fixtures / "vocab_uncased.txt", model / "vocab.txt")
    for suffix in (".index", ".data-00000-of-00001"):
        shutil.copy(ckpt / f"bert_model.ckpt{suffix}", model / f"bert_model.ckpt{suffix}")
    # extract_features asks for layers -1..-4: a 4-layer model of the same shape otherwise
    # (random weights saved under the original names; the fixture model has 2 layers).
    from bert_tf.checkpoints import save_original_checkpoint
    from bert_tf.modeling import BertConfig, BertEncoder

    model4 = tmp / "uncased_L-4_H-128_A-2"
    model4.mkdir()
    config4 = BertConfig.from_dict({**json.loads((ckpt / "bert_config.json").read_text()),
                                    "num_hidden_layers": 4})
    config4.to_json_file(str(model4 / "bert_config.json"))
    shutil.copy(original_fixtures / "vocab_uncased.txt", model4 / "vocab.txt")
    encoder4 = BertEncoder(config4)
    encoder4.build_from_config_shapes()
    save_original_checkpoint(encoder4, str(model4 / "bert_model.ckpt"))
    glue_dir = tmp / "glue_data"
    (glue_dir / "MRPC").mkdir(parents=True)
    for name, n in (("train.tsv", 17), ("dev.tsv", 9), ("test.tsv", 9)):
        with open(shared_data / "glue" / "MRPC" / name, encoding="utf-8") as f:
            (glue_dir / "MRPC" / name).write_text("".join(f.readline() for _ in range(n)),
                                                 encoding="utf-8")
    squad_dir = tmp / "squad"
    squad_dir.mkdir()
    v1, v2 = shared_data / "squad" / "dev-v1.1.json", shared_data / "squad" / "dev-v2.0.reconstructed.json"
    _squad_subset(v1, squad_dir / "train-v1.1.json", slice(0, 2), training=True)
    _squad_subset(v1, squad_dir / "dev-v1.1.json", slice(2, 3))
    _squad_subset(v2, squad_dir / "train-v2.0.json", slice(0, 2), training=True)
    _squad_subset(v2, squad_dir / "dev-v2.0.json", slice(2, 3))
    work = tmp / "cwd"
    work.mkdir()
    shutil.copy(original_fixtures / "sample_text.txt", work / "sample_text.txt")
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2",
               BERT_BASE_DIR=str(model), BERT_LARGE_DIR=str(model), GLUE_DIR=str(glue_dir),
               SQUAD_DIR=str(squad_dir), TPU_NAME="bert-tf-test-tpu", THRESH="-1.0",
               TRAINED_CLASSIFIER=str(tmp / "out" / "mrpc_output"))
    (tmp / "out").mkdir()
    return {"tmp": tmp / "out", "cwd": work, "env": env, "model4": str(model4)}


@pytest.mark.slow
@pytest.mark.parametrize("name,expect,files,command", readme_commands(),
                         ids=[c[0] for c in readme_commands()])
def test_readme_command(readme_env, name, expect, files, command):
    tmp, env = readme_env["tmp"], readme_env["env"]
    if name == "run_classifier_predict":  # $TRAINED_CLASSIFIER: the fine-tuned checkpoint
        state = (tmp / "mrpc_output" / "checkpoint")
        if not state.exists():
            pytest.skip("needs the run_classifier_mrpc command's checkpoint (run it first)")
        prefix = re.search(r'model_checkpoint_path: "([^"]+)"', state.read_text()).group(1)
        env = dict(env, TRAINED_CLASSIFIER=str(tmp / "mrpc_output" / prefix))
    if name == "extract_features":
        env = dict(env, BERT_BASE_DIR=readme_env["model4"])
    if name == "evaluate_v1" and not (tmp / "squad_base" / "predictions.json").exists():
        pytest.skip("needs the run_squad_v1 command's predictions.json (run it first)")
    proc = subprocess.run(["bash", "-c", _substitute_paths(command, tmp)], cwd=readme_env["cwd"],
                          env=env, capture_output=True, text=True, timeout=900)
    stderr_lines = [line for line in proc.stderr.splitlines() if line.strip()]
    if expect == "runs":
        assert proc.returncode == 0, proc.stderr[-3000:]
        for path in files:
            assert pathlib.Path(path.replace("/tmp/", f"{tmp}/")).exists(), path
        if name == "evaluate_v1":
            assert set(json.loads(proc.stdout.strip().splitlines()[-1])) == {"exact_match", "f1"}
    else:
        assert expect == "tpu_error"
        assert proc.returncode != 0
        assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
        last = stderr_lines[-1] if stderr_lines else ""
        assert "TPU" in last or "tpu" in last, proc.stderr[-3000:]
        assert not (readme_env["cwd"] / "gs:").exists()  # never a local folder named gs:


# ---------------------------------------------------------------------------------------------
# run_classifier_with_tfhub.py: --bert_hub_module_handle
# ---------------------------------------------------------------------------------------------
@pytest.mark.long
def test_run_classifier_with_bert_hub_module_handle(tmp_path, original_fixtures, shared_data):
    """An encoder SavedModel exported with its vocab as the hub module: vocab and casing come
    from the module's assets, and the run equals the same run from the release's three files."""
    from bert_tf.checkpoints import load_original_checkpoint
    from bert_tf.export.encoder import export_encoder_savedmodel
    from bert_tf.modeling import BertConfig, BertEncoder
    from bert_tf.tasks.classifier import ClassifierRunOptions, run_classifier

    ckpt = original_fixtures / "checkpoint"
    vocab = original_fixtures / "vocab_uncased.txt"
    config = BertConfig.from_json_file(str(ckpt / "bert_config.json"))
    encoder = BertEncoder(config)
    encoder.build_from_config_shapes()
    load_original_checkpoint(encoder, str(ckpt / "bert_model.ckpt"))
    module = tmp_path / "bert_uncased_hub_module"
    export_encoder_savedmodel(encoder, str(module), vocab_file=str(vocab), do_lower_case=True)

    hub = pytest.importorskip("tensorflow_hub")
    import tensorflow as tf

    layer = hub.KerasLayer(str(module))  # TF Hub's reusable-SavedModel API
    ids = tf.constant([[101, 7592, 2088, 102, 0]], tf.int32)
    out = layer({"input_word_ids": ids, "input_mask": tf.cast(ids > 0, tf.int32),
                 "input_type_ids": tf.zeros_like(ids)})
    assert out["pooled_output"].shape == (1, config.hidden_size)

    data_dir = tmp_path / "MRPC"
    data_dir.mkdir()
    for name, n in (("train.tsv", 17), ("dev.tsv", 9)):
        with open(shared_data / "glue" / "MRPC" / name, encoding="utf-8") as f:
            (data_dir / name).write_text("".join(f.readline() for _ in range(n)),
                                         encoding="utf-8")
    common = dict(task_name="MRPC", data_dir=str(data_dir), do_train=True, do_eval=True,
                  max_seq_length=32, train_batch_size=8, eval_batch_size=8, num_train_epochs=1.0)
    from_hub = run_classifier(ClassifierRunOptions(
        bert_hub_module_handle=str(module), bert_config_file=None, vocab_file=None,
        do_lower_case=False,  # the module's do_lower_case=True wins, as the original
        output_dir=str(tmp_path / "out_hub"), **common))
    from_files = run_classifier(ClassifierRunOptions(
        bert_config_file=str(ckpt / "bert_config.json"), vocab_file=str(vocab),
        init_checkpoint=str(ckpt / "bert_model.ckpt"), do_lower_case=True,
        output_dir=str(tmp_path / "out_files"), **common))
    assert from_hub["train"]["loss"] == pytest.approx(from_files["train"]["loss"], abs=1e-6)
    assert ((tmp_path / "out_hub" / "eval_results.txt").read_text()
            == (tmp_path / "out_files" / "eval_results.txt").read_text())
    assert json.loads((tmp_path / "out_hub" / "bert_config.json").read_text()) == config.to_dict()
