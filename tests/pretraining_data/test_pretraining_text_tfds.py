"""create_pretraining_data --tfds_data_dir: the pretraining-text TFDS builder (bert_pretraining_text,
prepared offline from a local text file) gives byte-identical TFRecords to --input_file on the
same text, in faithful and scalable mode; bad input is one clear line."""
from __future__ import annotations

import glob
import os
import pathlib
import subprocess
import sys
import tempfile

import pytest

from bert_tf.cli.create_pretraining_data import CreatePretrainingDataRun, create
from bert_tf.errors import UserInputError
from bert_tf.tasks import tfds_sources

pytest.importorskip("tensorflow_datasets")

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]
FLAGS = dict(do_lower_case=True, max_seq_length=64, max_predictions_per_seq=10,
             masked_lm_prob=0.15, random_seed=12345, dupe_factor=2)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, original_fixtures):
    """The original release's sample_text.txt as a text file and as a prepared TFDS dataset."""
    root = tmp_path_factory.mktemp("pretraining_text")
    text_dir = root / "text"
    text_dir.mkdir()
    text = text_dir / "sample_text.txt"
    text.write_bytes((original_fixtures / "sample_text.txt").read_bytes())
    tfds_dir = root / "tfds"
    tfds_sources.prepare(tfds_sources.PRETRAINING_TEXT, str(tfds_dir), str(text_dir))
    return {"text": str(text), "tfds": str(tfds_dir),
            "vocab": str(original_fixtures / "vocab_uncased.txt")}


def _leftover_text_files() -> list[str]:
    return glob.glob(os.path.join(tempfile.gettempdir(), "bert_tf_bert_pretraining_text_*"))


def test_tfds_text_gives_the_same_tfrecords_as_the_text_file(corpus, tmp_path):
    before = _leftover_text_files()
    outputs = {}
    for source, given in (("text", dict(input_file=corpus["text"])),
                          ("tfds", dict(tfds_data_dir=corpus["tfds"]))):
        output = tmp_path / f"{source}.tfrecord"
        create(CreatePretrainingDataRun(output_file=str(output), vocab_file=corpus["vocab"],
                                        **FLAGS, **given))
        outputs[source] = output.read_bytes()
    assert len(outputs["text"]) > 10_000
    assert outputs["tfds"] == outputs["text"]
    assert _leftover_text_files() == before  # the intermediate text file is removed


def test_tfds_text_scalable_mode_gives_the_same_shards(corpus, tmp_path):
    shards = {}
    for source, given in (("text", dict(input_file=corpus["text"])),
                          ("tfds", dict(tfds_data_dir=corpus["tfds"]))):
        prefix = tmp_path / source / "shard"
        create(CreatePretrainingDataRun(output_file=str(prefix), vocab_file=corpus["vocab"],
                                        mode="scalable", docs_per_shard=2, **FLAGS, **given))
        shards[source] = {os.path.basename(p): open(p, "rb").read()
                          for p in sorted(glob.glob(f"{prefix}*.tfrecord"))}
    assert len(shards["text"]) >= 2
    assert shards["tfds"] == shards["text"]


def test_bad_tfds_input_is_one_clear_error(corpus, tmp_path):
    def run(**given):
        create(CreatePretrainingDataRun(output_file=str(tmp_path / "out.tfrecord"),
                                        vocab_file=corpus["vocab"], **FLAGS, **given))

    with pytest.raises(UserInputError, match=r"--tfds_data_dir=.*nowhere is not a directory"):
        run(tfds_data_dir=str(tmp_path / "nowhere"))
    with pytest.raises(UserInputError, match=r"bert_pretraining_text is not prepared there"):
        run(tfds_data_dir=str(tmp_path))
    with pytest.raises(UserInputError, match="both given"):
        run(tfds_data_dir=corpus["tfds"], input_file=corpus["text"])
    with pytest.raises(UserInputError, match=r"--input_file is required \(or --tfds_data_dir\)"):
        run()
    assert not (tmp_path / "out.tfrecord").exists()


@pytest.mark.slow
def test_tool_with_tfds_data_dir_as_a_real_process(corpus, tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(PROJECT_ROOT))
    script = str(PROJECT_ROOT / "tools" / "create_pretraining_data.py")
    flags = [f"--{k}={v}" for k, v in FLAGS.items()] + [f"--vocab_file={corpus['vocab']}"]
    outputs = {}
    for source, flag in (("text", f"--input_file={corpus['text']}"),
                         ("tfds", f"--tfds_data_dir={corpus['tfds']}")):
        output = tmp_path / f"{source}.tfrecord"
        proc = subprocess.run([sys.executable, script, flag, f"--output_file={output}", *flags],
                              capture_output=True, text=True, env=env, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        outputs[source] = output.read_bytes()
    assert outputs["tfds"] == outputs["text"]
    proc = subprocess.run([sys.executable, script, f"--tfds_data_dir={tmp_path / 'nowhere'}",
                           f"--output_file={tmp_path / 'bad.tfrecord'}", *flags],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "--tfds_data_dir=" in errors[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
