"""Atomic versioned SavedModel writes: <export_dir>/<version>/, an existing version is an error
unless overwrite, a failed export leaves the previous version (and no temporary folder)."""
from __future__ import annotations

import os

import pytest
import tensorflow as tf

from bert_tf.export.savedmodel_io import (check_version, existing_versions,
                                          save_versioned_savedmodel, write_atomically)


class _Doubler(tf.Module):
    def __init__(self, factor: float):
        super().__init__()
        self.factor = tf.Variable(factor)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
    def serve(self, x):
        return {"y": x * self.factor}


def _factor(path) -> float:
    return float(tf.saved_model.load(str(path)).factor.numpy())


def test_versions_are_written_atomically_and_never_silently_replaced(tmp_path):
    base = tmp_path / "model"
    m = _Doubler(2.0)
    v1 = save_versioned_savedmodel(m, base, 1, signatures={"serving_default": m.serve})
    assert v1 == str(base / "1") and (base / "1" / "saved_model.pb").exists()
    save_versioned_savedmodel(_Doubler(3.0), base, "2")
    assert existing_versions(base) == [1, 2]
    with pytest.raises(FileExistsError, match="already exists"):
        save_versioned_savedmodel(_Doubler(4.0), base, 1)
    assert _factor(base / "1") == 2.0

    def failing_check(tmp):
        assert os.path.exists(os.path.join(tmp, "saved_model.pb"))
        raise RuntimeError("check failed")

    with pytest.raises(RuntimeError, match="check failed"):
        save_versioned_savedmodel(_Doubler(5.0), base, 1, overwrite=True, check=failing_check)
    assert _factor(base / "1") == 2.0  # The previous version is intact...
    assert sorted(os.listdir(base)) == ["1", "2"]  # ...and no temporary folder is left.

    save_versioned_savedmodel(_Doubler(6.0), base, 1, overwrite=True)
    assert _factor(base / "1") == 6.0
    assert sorted(os.listdir(base)) == ["1", "2"]


def test_failed_write_of_a_new_version_leaves_nothing(tmp_path):
    def write(tmp):
        open(os.path.join(tmp, "partial"), "w").close()
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomically(tmp_path / "m" / "3", write)
    assert os.listdir(tmp_path / "m") == []


@pytest.mark.parametrize("bad", [0, -1, "x", "1.5", ""])
def test_version_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="positive integer"):
        check_version(bad)
