"""Shared exports for the serving tests: built once per session from the original release's tiny
checkpoint (2 layers, hidden 128) with seq_length 16, and the C loader harness compiled once."""
from __future__ import annotations

import fcntl
import os
import pathlib
from collections.abc import Mapping

import pytest

from serving_setup import CLASSIFIER_LABELS, NER_LABELS, SEQ_LENGTH


@pytest.fixture(scope="session")
def fixture_model(original_fixtures) -> dict:
    """Paths of the original release's tiny checkpoint, its config and the uncased vocab."""
    ckpt = original_fixtures / "checkpoint"
    return {"bert_config_file": str(ckpt / "bert_config.json"),
            "init_checkpoint": str(ckpt / "bert_model.ckpt"),
            "vocab_file": str(original_fixtures / "vocab_uncased.txt")}


class SharedExports(Mapping):
    """model type -> <export_dir>/1, exported on first use and shared by the run's pytest-xdist
    workers: a file lock per type, so a type is exported once per run, whichever worker needs it
    first (each export costs ~10-50 s of CPU; with `--dist loadfile` several test files on two
    workers read them)."""

    def __init__(self, root: pathlib.Path, fixture_model: dict):
        self.root = root
        self.fixture_model = fixture_model
        root.mkdir(parents=True, exist_ok=True)

    def __iter__(self):
        from bert_tf.export.exporter import BERT_MODEL_TYPES

        return iter(BERT_MODEL_TYPES)

    def __len__(self):
        return len(list(iter(self)))

    def __getitem__(self, model_type: str) -> pathlib.Path:
        from bert_tf.export.exporter import BERT_MODEL_TYPES, ExportOptions, export_savedmodel

        if model_type not in BERT_MODEL_TYPES:
            raise KeyError(model_type)
        done = self.root / f"{model_type}.done"
        with open(self.root / f"{model_type}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not done.exists():
                extra = {"classifier": {"label_list": CLASSIFIER_LABELS},
                         "ner": {"label_list": NER_LABELS},
                         "squad": {"max_query_length": 6, "max_answer_length": 5},
                         "multiple_choice": {"num_choices": 3}}.get(model_type, {})
                opts = ExportOptions(model_type=model_type,
                                     export_dir=str(self.root / model_type), version=1,
                                     seq_length=SEQ_LENGTH, allow_untrained_head=True,
                                     **self.fixture_model, **extra)
                done.write_text(str(export_savedmodel(opts)))
        return pathlib.Path(done.read_text())


def _run_shared_dir(tmp_path_factory, name: str) -> pathlib.Path:
    """A folder shared by this run's xdist workers (their base temps' parent), else the base."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name


@pytest.fixture(scope="session")
def exports(tmp_path_factory, fixture_model) -> Mapping[str, pathlib.Path]:
    """model type -> <export_dir>/1 for every BERT export type (task heads randomly initialised:
    the fixture checkpoint is a pretraining one), exported on first use. GPT-1's types:
    tests/gpt/test_export.py."""
    return SharedExports(_run_shared_dir(tmp_path_factory, "shared_exports"), fixture_model)


@pytest.fixture(scope="session")
def harness(tmp_path_factory) -> str:
    """The compiled C harness (skips when gcc or the TF C API of the wheel is missing)."""
    from bert_tf.export.loader_harness import HarnessUnavailable, build_harness

    out = _run_shared_dir(tmp_path_factory, "shared_harness")
    out.mkdir(parents=True, exist_ok=True)
    try:
        with open(out / "build.lock", "w") as lock:  # compiled once per run, by one worker
            fcntl.flock(lock, fcntl.LOCK_EX)
            exe = out / "serving_harness"
            return str(exe) if exe.exists() else build_harness(out)
    except HarnessUnavailable as e:
        pytest.skip(f"cannot build the C loader harness: {e}")
