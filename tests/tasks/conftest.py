"""Fixtures shared by the task tests."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> str:
    """The compiled C-API loader harness (TF Serving's loading path without Python); skips
    when gcc or the wheel's TF C API is missing."""
    from bert_tf.export.loader_harness import HarnessUnavailable, build_harness

    try:
        return build_harness(tmp_path_factory.mktemp("harness"))
    except HarnessUnavailable as e:
        pytest.skip(f"cannot build the C loader harness: {e}")
