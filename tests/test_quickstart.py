"""The README's main job (tools/quickstart.py) end to end, with no ../shared and no download."""
import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from bert_tf.modeling import BertConfig
from bert_tf.quickstart import run_quickstart
from bert_tf.tokenization import FullTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_main_job_as_the_readme_runs_it(tmp_path):
    out = tmp_path / "qs"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "quickstart.py"),
                           f"--output_dir={out}"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["corpus"]["documents"] > 50
    config = BertConfig.from_json_file(out / "bert_config.json")
    tokenizer = FullTokenizer(str(out / "vocab.txt"), do_lower_case=True)
    assert config.vocab_size == len(tokenizer.vocab) == summary["vocab_size"]
    for token in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"):
        assert token in tokenizer.vocab
    names = dict(tf.train.list_variables(str(out / "bert_model.ckpt")))
    assert names["bert/embeddings/word_embeddings"] == [config.vocab_size, 128]
    assert "cls/predictions/output_bias" in names
    records = [json.loads(line) for line in (out / "features.jsonl").read_text().splitlines()]
    assert len(records) == 3 and records[0]["features"][0]["token"] == "[CLS]"
    assert len(records[0]["features"][0]["layers"][0]["values"]) == 128
    # a pair input ("a ||| b") has two [SEP]s
    assert [f["token"] for f in records[1]["features"]].count("[SEP]") == 2
    # pretraining ran on the generated data and lowered the loss; its weights are the checkpoint
    assert summary["pretraining_data"]["instances"] > 100
    pre = summary["pretraining"]
    assert pre["steps"] == 100 and pre["last_loss"] < pre["first_loss"]
    assert pre["eval"]["masked_lm_accuracy"] > 0.01  # chance is 1/vocab_size
    assert (out / "pretraining" / "eval_results.txt").exists()
    reader = tf.train.load_checkpoint(str(out / "bert_model.ckpt"))
    assert reader.get_tensor("bert/pooler/dense/bias").any()  # trained: biases start at zero
    # the SavedModels were written, reloaded and agree with FullTokenizer on raw text
    assert summary["export"]["ids_equal_full_tokenizer"]
    assert summary["export"]["raw_text_pooled_output_shape"] == [1, 128]
    assert (out / "export" / "preprocessor" / "1" / "saved_model.pb").exists()
    assert (out / "export" / "encoder" / "1" / "saved_model.pb").exists()

    # re-running over its own output is fine; a folder it did not write is refused untouched
    run_quickstart(str(out), vocab_size=1000, pretrain_steps=4)
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not written by the quickstart"):
        run_quickstart(str(other))
    assert os.listdir(other) == ["notes.txt"]
