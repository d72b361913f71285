"""Fixtures of the reliability drills (helpers: drill_tools.py)."""
from __future__ import annotations

import json
import pathlib

import pytest


@pytest.fixture(scope="session")
def dropout_config(original_fixtures, tmp_path_factory) -> pathlib.Path:
    """The fixture bert_config (L2 H128) with dropout 0.1 on hidden states and attention."""
    config = json.loads((original_fixtures / "optimizer" / "bert_config_no_dropout.json")
                        .read_text())
    config.update(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    path = tmp_path_factory.mktemp("config") / "bert_config.json"
    path.write_text(json.dumps(config))
    return path


@pytest.fixture(scope="session")
def pretraining_records(original_fixtures) -> pathlib.Path:
    """The original create_pretraining_data.py output (max_seq_length 128, 20 predictions)."""
    return original_fixtures / "pretraining_data" / "run1.tfrecord"


@pytest.fixture(scope="session")
def pretraining_reference(dropout_config, pretraining_records, tmp_path_factory) -> pathlib.Path:
    """The output_dir of an uninterrupted run_pretraining.py run (drill_tools.pretraining_flags),
    shared by the kill drills."""
    from drill_tools import pretraining_flags, run_tool

    output_dir = tmp_path_factory.mktemp("pretraining") / "uninterrupted"
    done = run_tool("run_pretraining", *pretraining_flags(dropout_config, pretraining_records,
                                                          output_dir))
    assert done.returncode == 0, done.stderr[-3000:]
    return output_dir
