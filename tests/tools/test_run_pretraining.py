"""tools/run_pretraining.py end to end on the original release's pretraining data, and the NaN stop."""
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.modeling import BertConfig
from bert_tf.training.pretraining_loop import PretrainingTrainer, TrainerOptions

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.long
def test_train_eval_export(tmp_path, original_fixtures):
    out = tmp_path / "out"
    cmd = [sys.executable, os.path.join(ROOT, "tools", "run_pretraining.py"),
           f"--input_file={original_fixtures / 'pretraining_data' / 'run1.tfrecord'}",
           f"--output_dir={out}", "--do_train=True", "--do_eval=True",
           f"--bert_config_file={original_fixtures / 'checkpoint' / 'bert_config.json'}",
           f"--init_checkpoint={original_fixtures / 'checkpoint' / 'bert_model.ckpt'}",
           "--train_batch_size=8", "--eval_batch_size=8", "--max_seq_length=128",
           "--max_predictions_per_seq=20", "--num_train_steps=4", "--num_warmup_steps=1",
           "--learning_rate=1e-4", "--save_checkpoints_steps=2", "--iterations_per_loop=2",
           "--max_eval_steps=3", f"--export_dir={out / 'encoder'}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "examples/s ETA" in proc.stderr
    results = dict(line.split(" = ") for line in
                   (out / "eval_results.txt").read_text().splitlines())
    assert sorted(results) == ["global_step", "loss", "masked_lm_accuracy", "masked_lm_loss",
                               "next_sentence_accuracy", "next_sentence_loss"]
    assert results["global_step"] == "4" and 0 <= float(results["masked_lm_accuracy"]) <= 1
    names = dict(tf.train.list_variables(str(out / "model.ckpt-4")))
    assert names["cls/seq_relationship/output_weights"] == [2, 128] and "global_step" in names
    assert sorted(f for f in os.listdir(out / "training_checkpoints") if f.endswith(".index")) \
        == ["ckpt-2.index", "ckpt-4.index"]
    # every checkpoint step also under the original names (the original's layout), and curves
    assert tf.train.latest_checkpoint(str(out)) == str(out / "model.ckpt-4")
    assert "global_step" in dict(tf.train.list_variables(str(out / "model.ckpt-2")))
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"
    encoder = tf.saved_model.load(str(out / "encoder"))
    ids = tf.constant([[101, 7592, 102, 0]])
    got = encoder.signatures["serving_default"](input_word_ids=ids, input_mask=tf.sign(ids),
                                                input_type_ids=tf.zeros_like(ids))
    assert got["sequence_output"].shape == (1, 4, 128) and len(encoder.trainable_variables) == 39
    assert os.path.isdir(out / "train")  # TensorBoard summaries


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tmp_path):
    config = BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=16, type_vocab_size=2)
    options = TrainerOptions(output_dir=str(tmp_path), train_batch_size=2, learning_rate=1e-3,
                             num_train_steps=10, num_warmup_steps=0, save_checkpoints_steps=2,
                             iterations_per_loop=2)
    trainer = PretrainingTrainer(config, options)
    good = {"input_ids": np.ones([2, 8], np.int32), "input_mask": np.ones([2, 8], np.int32),
            "segment_ids": np.zeros([2, 8], np.int32),
            "masked_lm_positions": np.ones([2, 2], np.int32),
            "masked_lm_ids": np.full([2, 2], 3, np.int32),
            "masked_lm_weights": np.ones([2, 2], np.float32),
            "next_sentence_labels": np.zeros([2, 1], np.int32)}
    bad = dict(good, masked_lm_weights=np.full([2, 2], np.nan, np.float32))

    def dataset_fn(ctx):
        good_ds = tf.data.Dataset.from_tensors(good).repeat(2)
        return good_ds.concatenate(tf.data.Dataset.from_tensors(bad).repeat())

    with pytest.raises(FloatingPointError, match="NaN/Inf at step 3.*ckpt-2"):
        trainer.train(dataset_fn)
    index = [f for f in os.listdir(tmp_path / "training_checkpoints") if f.endswith(".index")]
    assert index == ["ckpt-2.index"]
