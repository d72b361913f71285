"""Every pretraining checkpoint step also writes `<output_dir>/model.ckpt-<step>` under the
original names (the original's layout), listed in `<output_dir>/checkpoint`: each intermediate one
starts a fine-tuning run (--init_checkpoint), and the TF2 object-graph `training_checkpoints/ckpt-N`
given instead is one clear error naming the file to use."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.checkpoints import CheckpointError, read_checkpoint
from bert_tf.modeling import BertClassifier, BertConfig
from bert_tf.training.finetuning import init_model

WORKER = os.path.join(os.path.dirname(__file__), "_pretrain_worker.py")


@pytest.mark.long
def test_intermediate_pretraining_checkpoints_start_fine_tuning(original_fixtures, tmp_path):
    out = tmp_path / "pretrain"
    env = dict(os.environ, BERT_TF_FIXTURES=str(original_fixtures), TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, WORKER, "one_device", str(out), "6"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert len(json.loads(proc.stdout.strip().splitlines()[-1])) == 6
    # saves every 3 steps: model.ckpt-3 (intermediate) and model.ckpt-6, both listed
    assert tf.train.latest_checkpoint(str(out)) == str(out / "model.ckpt-6")
    state = (out / "checkpoint").read_text()
    assert 'all_model_checkpoint_paths: "model.ckpt-3"' in state
    intermediate = read_checkpoint(out / "model.ckpt-3")
    assert int(intermediate["global_step"]) == 3
    assert intermediate["cls/predictions/output_bias"].shape == (30522,)
    config = BertConfig.from_json_file(
        str(original_fixtures / "optimizer" / "bert_config_no_dropout.json"))
    model = BertClassifier(config, num_labels=2).build_from_config_shapes()
    init_model(model, str(out / "model.ckpt-3"))
    np.testing.assert_array_equal(np.array(model.encoder.embeddings.word_embeddings),
                                  intermediate["bert/embeddings/word_embeddings"])
    # the step-3 weights differ from the final ones: it really is the intermediate checkpoint
    final = read_checkpoint(out / "model.ckpt-6")
    assert not np.array_equal(final["bert/embeddings/LayerNorm/gamma"],
                              intermediate["bert/embeddings/LayerNorm/gamma"])
    with pytest.raises(CheckpointError, match="object-graph training checkpoint.*model.ckpt-<step>"):
        init_model(BertClassifier(config, num_labels=2).build_from_config_shapes(),
                   str(out / "training_checkpoints" / "ckpt-3"))
