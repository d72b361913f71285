"""Flag checks shared by the fine-tuning scripts' run options (each error names the flag)."""
from __future__ import annotations

import os
from typing import Iterable

from bert_tf.errors import UserInputError

MODE_FILES = (("do_train", "train_file"), ("do_eval", "eval_file"), ("do_predict", "predict_file"))


def check_modes_and_files(opts, mode_files: Iterable[tuple[str, str]] = MODE_FILES) -> None:
    """At least one mode is on, and every mode that is on has an existing input file.

    Raises UserInputError naming the flag, e.g. "--do_eval needs --eval_file (or --data_dir)".
    """
    mode_files = tuple(mode_files)
    if not any(getattr(opts, mode) for mode, _ in mode_files):
        names = ", ".join(f"`{mode}`" for mode, _ in mode_files)
        raise UserInputError(f"At least one of {names} must be True.")
    for mode, name in mode_files:
        if not getattr(opts, mode):
            continue
        path = getattr(opts, name)
        if not path:
            raise UserInputError(f"--{mode} needs --{name} (or --data_dir)")
        if not os.path.exists(path):
            raise UserInputError(f"--{name}={path} does not exist")


def check_positive(opts, names: Iterable[str]) -> None:
    """Every named option is > 0 (UserInputError naming the first that is not)."""
    for name in names:
        if getattr(opts, name) <= 0:
            raise UserInputError(f"--{name} must be positive, got {getattr(opts, name)}")
