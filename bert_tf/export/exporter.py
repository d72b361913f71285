"""One entry point for every export type (used by tools/export_savedmodel.py).

`export_savedmodel(ExportOptions(...))` builds the model from `bert_config.json` + checkpoint,
wraps it (encoder, preprocessor or task model), checks it is servable, and writes
`<export_dir>/<version>/` atomically.
"""
from __future__ import annotations

import dataclasses
import os
import re
from typing import Sequence

from bert_tf.export.savedmodel_io import ExportError, check_target_dir, check_version

MODEL_TYPES = ("encoder", "preprocessor", "classifier", "squad", "ner", "multiple_choice")


@dataclasses.dataclass
class ExportOptions:
    """Flags of tools/export_savedmodel.py.

    Attributes:
      model_type: one of MODEL_TYPES.
      export_dir: model base path; the export goes to <export_dir>/<version>/.
      version: positive integer.
      bert_config_file: bert_config.json (not needed for the preprocessor).
      init_checkpoint: original-format checkpoint (encoder: pretrained; task models: the
        fine-tuned checkpoint including the head).
      vocab_file: WordPiece vocab (preprocessor and task models).
      do_lower_case: tokenizer casing.
      seq_length: packed length of raw-text signatures (preprocessor and task models).
      num_labels: classifier / ner (or given by label_list).
      label_list: label names in id order (classifier / ner); exported as the `labels` output.
      num_choices: multiple_choice.
      max_query_length, max_answer_length: squad.
      allow_untrained_head: export a task model whose checkpoint has no head weights (the head
        keeps its random initialisation; only for trying the serving path).
      overwrite: replace an existing version.
    """

    model_type: str
    export_dir: str
    version: int | str = 1
    bert_config_file: str | None = None
    init_checkpoint: str | None = None
    vocab_file: str | None = None
    do_lower_case: bool = True
    seq_length: int = 128
    num_labels: int | None = None
    label_list: Sequence[str] | None = None
    num_choices: int = 4
    max_query_length: int = 64
    max_answer_length: int = 30
    allow_untrained_head: bool = False
    overwrite: bool = False


def _require(value, flag: str, model_type: str):
    if value in (None, ""):
        raise ExportError(f"--{flag} is required for --model_type={model_type}")
    return value


def validate_options(opts: ExportOptions) -> None:
    """Checks flags and files before TensorFlow work starts.

    Raises:
      ExportError (a UserInputError): one line naming the flag and what was expected.
    """
    if opts.model_type not in MODEL_TYPES:
        raise ExportError(f"--model_type must be one of {MODEL_TYPES}, got {opts.model_type!r}")
    check_version(opts.version)
    _require(opts.export_dir, "export_dir", opts.model_type)
    if os.path.exists(opts.export_dir) and not os.path.isdir(opts.export_dir):
        raise ExportError(f"--export_dir={opts.export_dir} is a file; expected a folder (the "
                          "model base path; the export goes to <export_dir>/<version>/)")
    check_target_dir(os.path.join(opts.export_dir, str(int(str(opts.version)))), opts.overwrite)
    t = opts.model_type
    if t != "preprocessor":
        path = _require(opts.bert_config_file, "bert_config_file", t)
        if not os.path.exists(path):
            raise ExportError(f"--bert_config_file={path} does not exist; expected a "
                              "bert_config.json")
    if t != "encoder":
        path = _require(opts.vocab_file, "vocab_file", t)
        if not os.path.exists(path):
            raise ExportError(f"--vocab_file={path} does not exist; expected a WordPiece "
                              "vocab.txt")
        if opts.seq_length < 3:
            raise ExportError(f"--seq_length must be >= 3, got {opts.seq_length}")
    if t in ("classifier", "ner"):
        if opts.label_list is not None and opts.num_labels is not None and (
                len(opts.label_list) != opts.num_labels):
            raise ExportError(f"--label_list has {len(opts.label_list)} labels but "
                              f"--num_labels={opts.num_labels}")
        if opts.label_list is None and opts.num_labels is None:
            raise ExportError(f"--num_labels or --label_list is required for --model_type={t}")
    if t == "multiple_choice" and opts.num_choices < 2:
        raise ExportError(f"--num_choices must be >= 2, got {opts.num_choices}")
    if t not in ("encoder", "preprocessor") and not opts.init_checkpoint and (
            not opts.allow_untrained_head):
        raise ExportError(f"--init_checkpoint (the fine-tuned checkpoint) is required for "
                          f"--model_type={t}")


def build_export_module(opts: ExportOptions):
    """The tf.Module to save and its signatures: (module, {name: concrete function})."""
    from bert_tf.checkpoints.original import CheckpointError
    from bert_tf.export.encoder import encoder_savedmodel_root
    from bert_tf.export.preprocessor import BertPreprocessor, HubPreprocessorExport
    from bert_tf.export.task_models import task_export_module
    from bert_tf.modeling import (BertClassifier, BertEncoder, BertMultipleChoice,
                                  BertSpanLabeler, BertTokenClassifier)
    from bert_tf.pretrained import load_bert

    t = opts.model_type
    if t == "preprocessor":
        module = HubPreprocessorExport(
            BertPreprocessor(opts.vocab_file, opts.seq_length, opts.do_lower_case))
        return module, module.serving_signatures()
    num_labels = len(opts.label_list) if opts.label_list is not None else opts.num_labels
    factories = {
        "encoder": BertEncoder,
        "classifier": lambda c: BertClassifier(c, num_labels=num_labels),
        "squad": BertSpanLabeler,
        "ner": lambda c: BertTokenClassifier(c, num_labels=num_labels),
        "multiple_choice": lambda c: BertMultipleChoice(c, num_choices=opts.num_choices),
    }
    heads = "if_present" if opts.allow_untrained_head else "required"
    try:
        _, _, model = load_bert(opts.bert_config_file,
                                vocab_file=None if t == "encoder" else opts.vocab_file,
                                init_checkpoint=opts.init_checkpoint or None,
                                do_lower_case=opts.do_lower_case, model_factory=factories[t],
                                heads=heads)
    except CheckpointError as e:
        missing = re.search(r"has no variable '([^']+)'", str(e))
        if t == "encoder" or missing is None or missing.group(1).startswith("bert/"):
            raise
        raise ExportError(
            f"--init_checkpoint={opts.init_checkpoint} has no {t} head (no variable "
            f"'{missing.group(1)}'); expected the fine-tuned checkpoint of a {t} run "
            "(model.ckpt-N in its --output_dir), or pass --allow_untrained_head to export an "
            "untrained head") from None
    if t == "encoder":
        root = encoder_savedmodel_root(model, opts.vocab_file or None, opts.do_lower_case)
        return root, {"serving_default": root.serving_default}
    preprocessor = BertPreprocessor(opts.vocab_file, opts.seq_length, opts.do_lower_case)
    kwargs = ({"max_query_length": opts.max_query_length,
               "max_answer_length": opts.max_answer_length} if t == "squad" else {})
    module = task_export_module(t, model, preprocessor, opts.label_list, **kwargs)
    return module, module.serving_signatures()


def export_savedmodel(opts: ExportOptions, check: bool = True) -> str:
    """Validates, builds and writes the export; returns the version folder.

    With `check`, the written SavedModel must pass `assert_servable` before it is renamed into
    place (otherwise nothing is left behind).
    """
    from bert_tf.export.savedmodel_io import save_versioned_savedmodel
    from bert_tf.export.serving_compat import assert_servable

    validate_options(opts)
    module, signatures = build_export_module(opts)
    return save_versioned_savedmodel(module, opts.export_dir, opts.version, signatures=signatures,
                                     overwrite=opts.overwrite,
                                     check=assert_servable if check else None)
