"""`--model_type=ner` exports carry the tags of the run_ner run they come from: without
--label_list / --num_labels the exporter reads run_ner's `label_list.txt` (else a `labels.json`)
next to --init_checkpoint, as the classifier export reads run_classifier's labels.json. The end
to end check (`long`) runs tools/export_savedmodel.py on a copy of the original release's tiny
checkpoint with a label_list.txt of our own tags and reads the served `labels`."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from bert_tf.export import exporter
from bert_tf.export.exporter import ExportError, ExportOptions

TOOL = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "export_savedmodel.py")
OWN_TAGS = ["B-DRUG", "I-DRUG", "O"]


def _options(tmp_path, **kwargs) -> ExportOptions:
    config = tmp_path / "bert_config.json"
    vocab = tmp_path / "vocab.txt"
    config.write_text("{}")
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n")
    return ExportOptions(model_type="ner", export_dir=str(tmp_path / "export"),
                         bert_config_file=str(config), vocab_file=str(vocab),
                         init_checkpoint=str(tmp_path / "run" / "model.ckpt-7"), **kwargs)


def test_ner_export_reads_the_runs_label_list(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "label_list.txt").write_text("".join(f"{t}\n" for t in OWN_TAGS))
    opts = _options(tmp_path)
    exporter.validate_options(opts)
    assert opts.label_list == OWN_TAGS
    # the folder itself as --init_checkpoint
    opts = _options(tmp_path)
    opts.init_checkpoint = str(run)
    exporter.validate_options(opts)
    assert opts.label_list == OWN_TAGS
    # flags win over the file
    opts = _options(tmp_path, label_list=["O", "B-X"])
    exporter.validate_options(opts)
    assert opts.label_list == ["O", "B-X"]
    opts = _options(tmp_path, num_labels=5)
    exporter.validate_options(opts)
    assert opts.label_list is None and opts.num_labels == 5
    # label_list.txt before labels.json; labels.json alone is read too
    (run / "labels.json").write_text(json.dumps(["O", "B-Y"]))
    opts = _options(tmp_path)
    exporter.validate_options(opts)
    assert opts.label_list == OWN_TAGS
    (run / "label_list.txt").unlink()
    opts = _options(tmp_path)
    exporter.validate_options(opts)
    assert opts.label_list == ["O", "B-Y"]


def test_ner_export_bad_or_missing_label_file(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(ExportError, match="--num_labels or --label_list is required for "
                                          "--model_type=ner"):
        exporter.validate_options(_options(tmp_path))
    (run / "label_list.txt").write_text("O\nB-X\nO\n")
    with pytest.raises(ExportError) as error:
        exporter.validate_options(_options(tmp_path))
    assert str(error.value) == (f"{run / 'label_list.txt'}: expected run_ner's tags, at least 2 "
                                "distinct ones, one a line; got ['O', 'B-X', 'O']")
    assert "\n" not in str(error.value)
    # a classifier export does not read run_ner's file
    (run / "label_list.txt").write_text("O\nB-X\n")
    opts = _options(tmp_path)
    opts.model_type = "classifier"
    with pytest.raises(ExportError, match="--num_labels or --label_list is required"):
        exporter.validate_options(opts)


@pytest.mark.long  # one tool process exporting the tiny model: ~30-60 s
def test_export_tool_ner_labels_from_run_dir(fixture_model, tmp_path):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the raw-text signature's ops)

    run = tmp_path / "run"
    run.mkdir()
    ckpt = fixture_model["init_checkpoint"]
    for name in os.listdir(os.path.dirname(ckpt)):
        if name.startswith(os.path.basename(ckpt)):
            shutil.copy(os.path.join(os.path.dirname(ckpt), name), run / name)
    (run / "label_list.txt").write_text("".join(f"{t}\n" for t in OWN_TAGS))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2",
           "PYTHONPATH": os.path.abspath(os.path.join(os.path.dirname(TOOL), ".."))}
    proc = subprocess.run(
        [sys.executable, TOOL, "--model_type=ner", f"--export_dir={tmp_path / 'ner'}",
         f"--bert_config_file={fixture_model['bert_config_file']}",
         f"--vocab_file={fixture_model['vocab_file']}", "--seq_length=16",
         f"--init_checkpoint={run / os.path.basename(ckpt)}", "--allow_untrained_head"],
        capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    serve = tf.saved_model.load(str(tmp_path / "ner" / "1")).signatures["serving_default"]
    out = serve(text=tf.constant(["aspirin helps john"]))
    assert out["probabilities"].shape[-1] == len(OWN_TAGS)
    labels = {x.decode() for x in out["labels"].numpy().reshape(-1)}
    assert labels <= set(OWN_TAGS)
    ids = out["label_ids"].numpy().reshape(-1)
    assert [x.decode() for x in out["labels"].numpy().reshape(-1)] == [OWN_TAGS[i] for i in ids]


def test_gpt_classifier_export_reads_the_runs_labels_json(tmp_path):
    """run_gpt_classifier --task_name=csv|tsv|jsonl writes labels.json beside its checkpoints;
    --model_type=gpt_classifier reads it as the BERT classifier export does."""
    from bert_tf.gpt.config import GptConfig

    config = tmp_path / "gpt_config.json"
    config.write_text(json.dumps(GptConfig(n_vocab=50, n_special=3, n_ctx=16, n_embd=8,
                                           n_head=2, n_layer=1).to_dict()))
    run = tmp_path / "run"
    run.mkdir()
    (run / "labels.json").write_text(json.dumps(["negative", "positive"]))

    def options(**kwargs) -> ExportOptions:
        return ExportOptions(model_type="gpt_classifier", export_dir=str(tmp_path / "export"),
                             gpt_config_file=str(config), gpt_task="classification",
                             seq_length=16, init_checkpoint=str(run / "model.ckpt-3"),
                             **kwargs)

    opts = options()
    exporter.validate_options(opts)
    assert opts.label_list == ["negative", "positive"]
    opts = options(num_labels=3)  # flags win over the file
    exporter.validate_options(opts)
    assert opts.label_list is None and opts.num_labels == 3
    (run / "labels.json").unlink()
    with pytest.raises(ExportError, match="--num_labels or --label_list is required"):
        exporter.validate_options(options())
