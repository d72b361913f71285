"""Flag checks shared by the fine-tuning scripts' run options (each error names the flag)."""
from __future__ import annotations

import dataclasses
import os
from typing import Iterable, Mapping

from bert_tf import io_utils
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
        io_utils.check_path(path, f"--{name}")
        if not io_utils.exists(path):
            raise UserInputError(f"--{name}={path} does not exist")


def check_positive(opts, names: Iterable[str]) -> None:
    """Every named option is > 0 (UserInputError naming the first that is not)."""
    for name in names:
        if getattr(opts, name) <= 0:
            raise UserInputError(f"--{name} must be positive, got {getattr(opts, name)}")


def check_common_options(opts, config=None, positive: Iterable[str] = ()) -> None:
    """The checks every fine-tuning run shares (UserInputError naming the flag): batch sizes,
    checkpoint counts and `positive` are > 0, `max_seq_length` >= 3 and within the model's
    `max_position_embeddings` (when `config` is given), `warmup_proportion` in [0, 1]."""
    common = ("train_batch_size", "predict_batch_size", "save_checkpoints_steps",
              "keep_checkpoint_max")
    if hasattr(opts, "eval_batch_size"):
        common += ("eval_batch_size",)
    check_positive(opts, (*common, *positive))
    if opts.max_seq_length < 3:
        raise UserInputError(f"--max_seq_length must be at least 3 ([CLS] A [SEP] needs room), "
                             f"got {opts.max_seq_length}")
    if not 0.0 <= opts.warmup_proportion <= 1.0:
        raise UserInputError(f"--warmup_proportion must be in [0, 1], got "
                             f"{opts.warmup_proportion}")
    if config is not None and opts.max_seq_length > config.max_position_embeddings:
        raise UserInputError(
            f"Cannot use sequence length {opts.max_seq_length} because the BERT model was only "
            f"trained up to sequence length {config.max_position_embeddings} "
            f"(--max_seq_length vs max_position_embeddings in {opts.bert_config_file})")


def files_from_data_dir(opts, file_names: Mapping[str, str]):
    """`opts` with each file flag that is not given set to `<data_dir>/<its file name>` (when
    `--data_dir` is given), e.g. {"train_file": "eng.train"}."""
    if not getattr(opts, "data_dir", None):
        return opts
    return dataclasses.replace(opts, **{
        name: getattr(opts, name) or os.path.join(opts.data_dir, file_name)
        for name, file_name in file_names.items()})
