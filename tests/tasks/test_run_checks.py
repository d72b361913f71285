"""Flag checks shared by run_ner and run_swag: each error names the flag."""
import types

import pytest

from bert_tf.tasks.run_checks import check_modes_and_files, check_positive


def _opts(tmp_path, **kw):
    base = dict(do_train=False, do_eval=False, do_predict=False, train_file=None, eval_file=None,
                predict_file=None, train_batch_size=8)
    base.update(kw)
    return types.SimpleNamespace(**base)


def test_no_mode(tmp_path):
    with pytest.raises(ValueError, match="At least one of `do_train`, `do_eval`, `do_predict`"):
        check_modes_and_files(_opts(tmp_path))


def test_mode_without_file_and_missing_file(tmp_path):
    with pytest.raises(ValueError, match="--do_eval needs --eval_file"):
        check_modes_and_files(_opts(tmp_path, do_eval=True))
    with pytest.raises(ValueError, match=r"--train_file=.*nope.csv does not exist"):
        check_modes_and_files(_opts(tmp_path, do_train=True, train_file=str(tmp_path / "nope.csv")))


def test_valid_and_positive(tmp_path):
    f = tmp_path / "train.csv"
    f.write_text("x")
    check_modes_and_files(_opts(tmp_path, do_train=True, train_file=str(f)))
    check_positive(_opts(tmp_path), ["train_batch_size"])
    with pytest.raises(ValueError, match="--train_batch_size must be positive, got 0"):
        check_positive(_opts(tmp_path, train_batch_size=0), ["train_batch_size"])
