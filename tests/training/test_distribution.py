"""Strategy wiring and early errors (TPU up to the cluster resolver, which cannot run here)."""
import pytest
import tensorflow as tf

from bert_tf.errors import UserInputError

from bert_tf.training.distribution import check_global_batch, check_tpu_paths, create_strategy
from bert_tf.pretraining_data.tfrecord_reader import expand_input_files
from bert_tf.runs.bert_pretraining import PretrainingRun, run_pretraining


def test_batch_not_divisible_by_replicas():
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    assert check_global_batch(32, strategy) == 32
    with pytest.raises(ValueError, match="--train_batch_size=7 is not divisible by the 2 replicas"):
        check_global_batch(7, type("S", (), {"num_replicas_in_sync": 2})())


def test_tpu_rejects_local_paths():
    check_tpu_paths(["gs://bucket/a.tfrecord"], "--input_file")
    with pytest.raises(ValueError, match="--output_dir '/tmp/out' is a local path"):
        check_tpu_paths(["/tmp/out"], "--output_dir")


def test_tpu_wiring_reaches_the_resolver():
    seen = {}

    class Resolver:
        def __init__(self, tpu, zone, project):
            seen.update(tpu=tpu, zone=zone, project=project)
            raise RuntimeError("no TPU here")

    # the resolver's failure becomes one line naming the flag (no TPU on this machine)
    with pytest.raises(UserInputError, match=r"--tpu_name=my-tpu: cannot reach the TPU "
                                             r"\(RuntimeError: no TPU here\)"):
        create_strategy("tpu", tpu_name="my-tpu", tpu_zone="us-central1-b", gcp_project="p",
                        tpu_resolver_factory=Resolver)
    assert seen == {"tpu": "my-tpu", "zone": "us-central1-b", "project": "p"}
    with pytest.raises(ValueError, match="needs --tpu_name or --master"):
        create_strategy("tpu")


def test_multi_worker_needs_tf_config(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ValueError, match="TF_CONFIG"):
        create_strategy("multi_worker_mirrored")
    with pytest.raises(ValueError, match="unknown distribution strategy 'gpu'"):
        create_strategy("gpu")


def test_run_errors_name_the_flag(tmp_path, original_fixtures):
    with pytest.raises(ValueError, match="--input_file: no file matches '.*nothing-\\*'"):
        expand_input_files(str(tmp_path / "nothing-*"))
    config = str(original_fixtures / "checkpoint" / "bert_config.json")
    with pytest.raises(ValueError, match="do_train or --do_eval"):
        run_pretraining(PretrainingRun(bert_config_file=config, input_file="x",
                                       output_dir=str(tmp_path)))
    with pytest.raises(ValueError, match="--max_seq_length=1024 is longer than max_position"):
        run_pretraining(PretrainingRun(bert_config_file=config, input_file="x",
                                       output_dir=str(tmp_path), do_train=True,
                                       max_seq_length=1024))
