"""Shared exports for the serving tests: built once per session from the original release's tiny
checkpoint (2 layers, hidden 128) with seq_length 16, and the C loader harness compiled once."""
from __future__ import annotations

import pathlib

import pytest

from serving_setup import CLASSIFIER_LABELS, NER_LABELS, SEQ_LENGTH


@pytest.fixture(scope="session")
def fixture_model(original_fixtures) -> dict:
    """Paths of the original release's tiny checkpoint, its config and the uncased vocab."""
    ckpt = original_fixtures / "checkpoint"
    return {"bert_config_file": str(ckpt / "bert_config.json"),
            "init_checkpoint": str(ckpt / "bert_model.ckpt"),
            "vocab_file": str(original_fixtures / "vocab_uncased.txt")}


@pytest.fixture(scope="session")
def exports(tmp_path_factory, fixture_model) -> dict[str, pathlib.Path]:
    """model type -> <export_dir>/1 for every BERT export type (task heads randomly initialised:
    the fixture checkpoint is a pretraining one). GPT-1's types:
    tests/gpt/test_export.py."""
    from bert_tf.export.exporter import BERT_MODEL_TYPES, ExportOptions, export_savedmodel

    base = tmp_path_factory.mktemp("exports")
    out = {}
    for model_type in BERT_MODEL_TYPES:
        extra = {"classifier": {"label_list": CLASSIFIER_LABELS},
                 "ner": {"label_list": NER_LABELS},
                 "squad": {"max_query_length": 6, "max_answer_length": 5},
                 "multiple_choice": {"num_choices": 3}}.get(model_type, {})
        opts = ExportOptions(model_type=model_type, export_dir=str(base / model_type), version=1,
                             seq_length=SEQ_LENGTH, allow_untrained_head=True,
                             **fixture_model, **extra)
        out[model_type] = pathlib.Path(export_savedmodel(opts))
    return out


@pytest.fixture(scope="session")
def harness(tmp_path_factory) -> str:
    """The compiled C harness (skips when gcc or the TF C API of the wheel is missing)."""
    from bert_tf.export.loader_harness import HarnessUnavailable, build_harness

    try:
        return build_harness(tmp_path_factory.mktemp("harness"))
    except HarnessUnavailable as e:
        pytest.skip(f"cannot build the C loader harness: {e}")
