"""One entry point for every export type, BERT's and GPT-1's (used by
tools/export_savedmodel.py).

`export_savedmodel(ExportOptions(...))` builds the model — BERT from `bert_config.json` +
checkpoint; GPT-1 from a GPT config + OpenAI-layout params folder or fine-tuned checkpoint —,
wraps it (encoder, preprocessor, task model, GPT-1 LM or classifier), checks it is servable, and
writes `<export_dir>/<version>/` atomically.
"""
from __future__ import annotations

import dataclasses
import os
import re
from typing import Sequence

from bert_tf.export.savedmodel_io import ExportError, check_target_dir, check_version

BERT_MODEL_TYPES = ("encoder", "preprocessor", "classifier", "squad", "ner", "multiple_choice")
GPT_MODEL_TYPES = ("gpt_lm", "gpt_classifier", "gpt_causal_lm")
MODEL_TYPES = BERT_MODEL_TYPES + GPT_MODEL_TYPES
"""The values of --model_type."""

GPT_TASKS = ("classification", "entailment", "similarity", "multiple_choice")
"""--gpt_task: `bert_tf.gpt.task_model.TASKS` (repeated so that flags are checked before
TensorFlow loads; a test keeps the two equal)."""

GPT_ONLY_FLAGS = ("gpt_config_file", "gpt_task", "encoder_path", "bpe_path", "bpe_corpus_file")
"""Flags (default None) of the GPT-1 types only."""


@dataclasses.dataclass
class ExportOptions:
    """Flags of tools/export_savedmodel.py.

    Attributes:
      export_format: savedmodel (TF Serving, every signature) or tflite (LiteRT: the task
        model's token-id signature as <export_dir>/<version>/model.tflite; classifier, squad,
        ner, multiple_choice; `bert_tf.export.lite`).
      quantize: unset (float32); int8: savedmodel: int8-stored Dense kernels of a BERT model
        (`bert_tf.export.quantize`), tflite: the converter's dynamic-range int8; float16:
        tflite only (float16 weights).
      model_type: one of MODEL_TYPES: BERT's encoder, preprocessor, classifier, squad, ner,
        multiple_choice; GPT-1's gpt_lm (the pretrained LM's forward pass), gpt_classifier (a
        fine-tuned GptClassifier) and gpt_causal_lm (the LM's generate / score signatures,
        `bert_tf.export.gpt_lm`).
      export_dir: model base path; the export goes to <export_dir>/<version>/.
      version: positive integer.
      bert_config_file: bert_config.json (BERT types except the preprocessor).
      init_checkpoint: BERT: original-format checkpoint (encoder: pretrained; task models: the
        fine-tuned checkpoint including the head). gpt_lm: an OpenAI-layout params folder
        (params_shapes.json + params_0..9.npy) or a run_gpt_pretraining.py --output_dir (its
        original_params/); gpt_causal_lm: the same (its special_rows.npy, when present, gives
        the special-token rows). gpt_classifier: the fine-tuned checkpoint (model.ckpt-N in
        run_gpt_classifier.py's --output_dir, or that folder); with --allow_untrained_head also a
        params folder or pretraining --output_dir (the head untrained).
      vocab_file: WordPiece vocab (preprocessor and task models; gpt_classifier: a WordPiece
        model's vocab, adds the raw-text signature).
      do_lower_case: tokenizer casing.
      seq_length: packed length of raw-text signatures (preprocessor and task models;
        gpt_classifier: <= n_ctx).
      num_labels: classifier / ner / gpt_classifier (or given by label_list); 1 exports a
        regression (classifier, gpt_classifier).
      label_list: label names in id order (classifier / ner / gpt_classifier); exported as the
        `labels` output. classifier / gpt_classifier without it and --num_labels: the
        labels.json that run_classifier / run_gpt_classifier --task_name=csv|tsv|jsonl wrote
        next to --init_checkpoint, if any;
        ner: run_ner's label_list.txt there (else a labels.json).
      num_choices: multiple_choice.
      max_query_length, max_answer_length: squad.
      allow_untrained_head: export a task model whose checkpoint has no head weights (the head
        keeps its random initialisation; only for trying the serving path).
      overwrite: replace an existing version.
      gpt_config_file: GptConfig JSON (gpt_lm, gpt_classifier), as run_gpt_pretraining.py's /
        run_gpt_classifier.py's --gpt_config_file.
      gpt_task: gpt_classifier: the input transformation of the fine-tuning run: classification,
        entailment, similarity or multiple_choice (run_gpt_classifier.py's task kind, e.g.
        similarity for MRPC / QQP / STS-B).
      encoder_path, bpe_path: gpt_classifier, gpt_causal_lm: the original BPE files (encoder_bpe_40000.json,
        vocab_40000.bpe) of a BPE model; add the raw-text signature (in-graph BPE).
      bpe_corpus_file: gpt_classifier / gpt_causal_lm with --encoder_path: a UTF-8 text file, one text per line,
        like the texts the model will serve (their chunks the in-graph BPE's rules get wrong go
        into its chunk table; needs ftfy and spaCy, the [gpt] extra).
      max_text_length: gpt_classifier: cut every text of the raw-text signature to its first N
        tokens (0: the budget that always fits, (seq_length - specials) // texts).
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
    gpt_config_file: str | None = None
    gpt_task: str | None = None
    encoder_path: str | None = None
    bpe_path: str | None = None
    bpe_corpus_file: str | None = None
    max_text_length: int = 0
    export_format: str = "savedmodel"
    quantize: str | None = None


def _require(value, flag: str, model_type: str):
    if value in (None, ""):
        raise ExportError(f"--{flag} is required for --model_type={model_type}")
    return value


def _refuse(opts: ExportOptions, flags: Sequence[str], why: str) -> None:
    """ExportError naming the first of `flags` that is set (not None / empty / 0)."""
    for flag in flags:
        if getattr(opts, flag) not in (None, "", 0, False):
            raise ExportError(f"--{flag} does not apply to --model_type={opts.model_type} "
                              f"({why})")


def _require_file(path, flag: str, what: str) -> None:
    if not os.path.exists(path):
        raise ExportError(f"--{flag}={path} does not exist; expected {what}")


def _validate_bert(opts: ExportOptions) -> None:
    t = opts.model_type
    _refuse(opts, GPT_ONLY_FLAGS + ("max_text_length",), "a flag of the GPT-1 types")
    if t != "preprocessor":
        _require_file(_require(opts.bert_config_file, "bert_config_file", t), "bert_config_file",
                      "a bert_config.json")
    if t != "encoder":
        _require_file(_require(opts.vocab_file, "vocab_file", t), "vocab_file",
                      "a WordPiece vocab.txt")
        if opts.seq_length < 3:
            raise ExportError(f"--seq_length must be >= 3, got {opts.seq_length}")
    if t in ("classifier", "ner"):
        _check_label_flags(opts)
    if t == "multiple_choice" and opts.num_choices < 2:
        raise ExportError(f"--num_choices must be >= 2, got {opts.num_choices}")
    if t not in ("encoder", "preprocessor") and not opts.init_checkpoint and (
            not opts.allow_untrained_head):
        raise ExportError(f"--init_checkpoint (the fine-tuned checkpoint) is required for "
                          f"--model_type={t}")


RUN_LABELS_FILE = "labels.json"
"""run_classifier's own-data runs (--task_name=csv|tsv|jsonl) write their label names, in id
order, as a JSON list to this file of their --output_dir."""


RUN_NER_LABELS_FILE = "label_list.txt"
"""run_ner writes its tags, in id order, one a line to this file of its --output_dir."""


def run_label_list(init_checkpoint: str | None, model_type: str = "classifier"
                   ) -> list[str] | None:
    """The label names a fine-tuning run wrote next to its checkpoints (in the checkpoint's
    folder, or in `init_checkpoint` itself if it is a folder): `labels.json` (run_classifier's
    own-data runs); for `model_type="ner"` run_ner's `label_list.txt` first, then
    `labels.json`. None when there is none."""
    if not init_checkpoint:
        return None
    folder = init_checkpoint if os.path.isdir(init_checkpoint) else os.path.dirname(
        init_checkpoint)
    if model_type == "ner":
        tags_path = os.path.join(folder, RUN_NER_LABELS_FILE)
        if os.path.isfile(tags_path):
            return _read_tag_lines(tags_path)
    path = os.path.join(folder, RUN_LABELS_FILE)
    if not os.path.isfile(path):
        return None
    import json

    try:
        with open(path, encoding="utf-8") as f:
            labels = json.load(f)
    except ValueError as e:
        raise ExportError(f"{path}: not JSON ({e}); expected run_classifier's list of label "
                          "names") from None
    if not (isinstance(labels, list) and labels and all(isinstance(x, str) for x in labels)):
        raise ExportError(f"{path}: expected a JSON list of label names")
    return labels


def _read_tag_lines(path: str) -> list[str]:
    """run_ner's label_list.txt: distinct tags, one a line (blank lines skipped)."""
    with open(path, encoding="utf-8") as f:
        tags = [line.strip() for line in f if line.strip()]
    if len(tags) < 2 or len(set(tags)) != len(tags):
        raise ExportError(f"{path}: expected run_ner's tags, at least 2 distinct ones, one a "
                          f"line; got {tags[:10]}")
    return tags


def _check_label_flags(opts: ExportOptions) -> None:
    if (opts.model_type in ("classifier", "ner", "gpt_classifier") and opts.label_list is None
            and opts.num_labels is None):
        # a run_classifier / run_gpt_classifier --task_name=csv|tsv|jsonl run or a run_ner
        # run: its labels (labels.json / label_list.txt) travel into the export
        opts.label_list = run_label_list(opts.init_checkpoint, opts.model_type)
    if opts.label_list is not None and opts.num_labels is not None and (
            len(opts.label_list) != opts.num_labels):
        raise ExportError(f"--label_list has {len(opts.label_list)} labels but "
                          f"--num_labels={opts.num_labels}")
    if opts.label_list is None and opts.num_labels is None:
        raise ExportError(f"--num_labels or --label_list is required for "
                          f"--model_type={opts.model_type}")


def gpt_params_folder(path: str) -> str | None:
    """The OpenAI-layout params folder `path` names: itself, or the `original_params/` of a
    run_gpt_pretraining.py --output_dir; None when it is neither."""
    from bert_tf.checkpoints.openai import SHAPES_FILE

    for folder in (path, os.path.join(path, "original_params")):
        if os.path.isfile(os.path.join(folder, SHAPES_FILE)):
            return folder
    return None


def _gpt_config(opts: ExportOptions):
    from bert_tf.gpt.config import GptConfig

    path = _require(opts.gpt_config_file, "gpt_config_file", opts.model_type)
    _require_file(path, "gpt_config_file", "a GPT config JSON (n_vocab, n_special, n_ctx, ...)")
    return GptConfig.from_json_file(path)


def _validate_gpt(opts: ExportOptions) -> None:
    t = opts.model_type
    if opts.bert_config_file:
        raise ExportError(f"--bert_config_file does not apply to --model_type={t} (a BERT "
                          "config); give the GPT config as --gpt_config_file")
    config = _gpt_config(opts)
    if t in ("gpt_lm", "gpt_causal_lm"):
        if t == "gpt_lm":
            _refuse(opts, ("gpt_task", "vocab_file", "encoder_path", "bpe_path",
                           "bpe_corpus_file", "label_list", "num_labels", "max_text_length",
                           "allow_untrained_head"),
                    "the LM has no task head and takes token ids")
        else:
            _refuse(opts, ("gpt_task", "vocab_file", "label_list", "num_labels",
                           "max_text_length", "allow_untrained_head"),
                    "the LM generates and scores; its text encoder is --encoder_path/--bpe_path")
            _check_bpe_flags(opts)
        path = _require(opts.init_checkpoint, "init_checkpoint", t)
        if gpt_params_folder(path) is None:
            raise ExportError(f"--init_checkpoint={path}: neither an OpenAI-layout GPT-1 params "
                              "folder (params_shapes.json + params_0..9.npy) nor a "
                              "run_gpt_pretraining.py --output_dir holding original_params/")
        return
    task = _require(opts.gpt_task, "gpt_task", t)
    if task not in GPT_TASKS:
        raise ExportError(f"--gpt_task must be one of {GPT_TASKS}, got {task!r}")
    if task == "multiple_choice":
        _refuse(opts, ("label_list", "num_labels"), "multiple choice scores each choice")
    else:
        _check_label_flags(opts)
        if opts.label_list is not None and len(opts.label_list) < 2:
            raise ExportError(f"--label_list must name >= 2 classes, got {opts.label_list}")
        if opts.num_labels is not None and opts.num_labels < 1:
            raise ExportError(f"--num_labels must be >= 2 (1: a regression), got "
                              f"{opts.num_labels}")
    if opts.vocab_file and (opts.encoder_path or opts.bpe_path):
        raise ExportError("--vocab_file (WordPiece) and --encoder_path/--bpe_path (BPE) are two "
                          "text encoders; give one")
    _check_bpe_flags(opts)
    if not 3 <= opts.seq_length <= config.n_ctx:
        raise ExportError(f"--seq_length must be in [3, n_ctx={config.n_ctx}] "
                          f"({opts.gpt_config_file}), got {opts.seq_length}")
    if opts.max_text_length < 0:
        raise ExportError(f"--max_text_length must be >= 0, got {opts.max_text_length}")
    if opts.init_checkpoint:
        if gpt_params_folder(opts.init_checkpoint) is not None and not opts.allow_untrained_head:
            raise ExportError(
                f"--init_checkpoint={opts.init_checkpoint} holds pretrained GPT-1 params, no "
                "classifier head; expected the fine-tuned checkpoint of a run_gpt_classifier.py "
                "run (model.ckpt-N in its --output_dir), or pass --allow_untrained_head to "
                "export an untrained head")
    elif not opts.allow_untrained_head:
        raise ExportError(f"--init_checkpoint (the fine-tuned checkpoint) is required for "
                          f"--model_type={t}")


def _check_bpe_flags(opts: ExportOptions) -> None:
    if bool(opts.encoder_path) != bool(opts.bpe_path):
        raise ExportError("--encoder_path and --bpe_path go together (the original BPE's "
                          "encoder_bpe_40000.json and vocab_40000.bpe)")
    if opts.bpe_corpus_file and not opts.encoder_path:
        raise ExportError("--bpe_corpus_file goes with --encoder_path/--bpe_path (it builds the "
                          "in-graph BPE's chunk table)")
    for flag, what in (("vocab_file", "a WordPiece vocab.txt"),
                       ("encoder_path", "the original encoder_bpe_40000.json"),
                       ("bpe_path", "the original vocab_40000.bpe"),
                       ("bpe_corpus_file", "a text file, one text per line")):
        if getattr(opts, flag):
            _require_file(getattr(opts, flag), flag, what)


LITE_MODEL_TYPES = ("classifier", "squad", "ner", "multiple_choice")
"""--model_type values --export_format=tflite converts (their token-id signature)."""


def _validate_format(opts: ExportOptions) -> None:
    """--export_format and --quantize."""
    t, q = opts.model_type, opts.quantize or None
    if opts.export_format not in ("savedmodel", "tflite"):
        raise ExportError(f"--export_format must be savedmodel or tflite, got "
                          f"{opts.export_format!r}")
    if q not in (None, "int8", "float16"):
        raise ExportError(f"--quantize must be int8 or float16 (or unset), got {q!r}")
    if opts.export_format == "tflite" and t not in LITE_MODEL_TYPES:
        raise ExportError(f"--export_format=tflite converts the task models {LITE_MODEL_TYPES} "
                          f"(their token-id signature), not --model_type={t}")
    if opts.export_format == "savedmodel" and q == "float16":
        raise ExportError("--quantize=float16 is for --export_format=tflite; a SavedModel takes "
                          "--quantize=int8")
    if q == "int8" and t in GPT_MODEL_TYPES:
        raise ExportError(f"--quantize=int8 quantizes BERT's Dense layers; --model_type={t} is "
                          "built of GPT-1's GptConv1D layers, which it does not quantize")
    if q == "int8" and t == "preprocessor":
        raise ExportError("--quantize=int8 does not apply to --model_type=preprocessor (it has "
                          "no weights)")


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
    if opts.model_type in GPT_MODEL_TYPES:
        _validate_gpt(opts)
    else:
        _validate_bert(opts)
    _validate_format(opts)


def _load_fine_tuned(load, opts: ExportOptions, run: str, body_prefix: str):
    """`load()` (weights into a task model), a checkpoint without the head's variables (names
    not starting with `body_prefix`) an ExportError that says what to pass instead."""
    from bert_tf.checkpoints.original import CheckpointError

    try:
        return load()
    except CheckpointError as e:
        missing = re.search(r"has no variable '([^']+)'", str(e))
        if missing is None or missing.group(1).startswith(body_prefix):
            raise
        raise ExportError(
            f"--init_checkpoint={opts.init_checkpoint} has no {opts.model_type} head (no "
            f"variable '{missing.group(1)}'); expected the fine-tuned checkpoint of {run} run "
            "(model.ckpt-N in its --output_dir), or pass --allow_untrained_head to export an "
            "untrained head") from None


def _gpt_model(opts: ExportOptions):
    """The GPT-1 model of a gpt_lm / gpt_classifier / gpt_causal_lm export, its weights
    loaded."""
    from bert_tf.checkpoints.openai import load_original_params, load_special_rows
    from bert_tf.gpt.model import GptModel
    from bert_tf.gpt.task_model import GptClassifier
    from bert_tf.training.finetuning import load_checkpoint

    config = _gpt_config(opts)
    params = gpt_params_folder(opts.init_checkpoint) if opts.init_checkpoint else None
    if opts.model_type in ("gpt_lm", "gpt_causal_lm"):
        # As run_gpt_pretraining.py builds and loads it (the special-token rows, which the
        # original layout does not hold, drawn as train.py draws them).
        model = GptModel(config, classifier=False, name="gpt")
        load_original_params(model, params, n_transfer=config.n_layer)
        if opts.model_type == "gpt_causal_lm":
            load_special_rows(model, params)  # trained rows when the folder has them
        return model
    regression = opts.num_labels == 1
    num_classes = (None if opts.gpt_task == "multiple_choice" or regression
                   else len(opts.label_list) if opts.label_list is not None else opts.num_labels)
    # Built as run_gpt_classifier.py builds it (its checkpoint names are the Keras paths).
    model = GptClassifier(config, task=opts.gpt_task, num_classes=num_classes,
                          regression=regression, name="gpt_classifier")
    if params is not None:  # --allow_untrained_head: the pretrained transformer, a new head
        load_original_params(model.transformer, params, n_transfer=config.n_layer)
    elif opts.init_checkpoint:
        heads = "if_present" if opts.allow_untrained_head else "required"
        loaded = _load_fine_tuned(
            lambda: load_checkpoint(model, opts.init_checkpoint, heads=heads), opts,
            "a run_gpt_classifier.py", body_prefix="transformer/")
        body = [name for name in loaded["initialized"] if name.startswith("transformer/")]
        if body:  # heads="if_present" makes every variable optional
            raise ExportError(f"--init_checkpoint={opts.init_checkpoint} has no variable "
                              f"'{body[0]}' of the GPT-1 transformer; expected the checkpoint "
                              "of a run_gpt_classifier.py run with this --gpt_config_file")
    return model


def merge_run_lora(model, init_checkpoint: str | None, heads: str = "required") -> list[str]:
    """A LoRA fine-tuning run's checkpoint (adapters under `.../lora_a|lora_b`, see
    `bert_tf.training.lora_finetuning`): loads it with its adapters into `model` and merges them
    into the kernels (`bert_tf.modeling.lora.merge_lora`), so the export serves plain kernels
    (no LoRA variables or ops; outputs equal the unmerged model's within float rounding).
    Returns the merged layers' paths ([] for a checkpoint without adapters)."""
    from bert_tf.checkpoints import CheckpointError, resolve_checkpoint_prefix
    from bert_tf.modeling.lora import lora_layers, merge_lora
    from bert_tf.training.finetuning import load_checkpoint
    from bert_tf.training.lora_finetuning import checkpoint_lora_layers

    if init_checkpoint and not lora_layers(model):
        try:
            prefix = resolve_checkpoint_prefix(init_checkpoint)
        except CheckpointError:  # e.g. an encoder SavedModel folder: no adapters
            return []
        if not checkpoint_lora_layers(prefix):
            return []
        load_checkpoint(model, prefix, heads=heads)
    return merge_lora(model)


def _gpt_export_module(opts: ExportOptions):
    from bert_tf.export.gpt import GptLmServingModule, gpt_classifier_serving_module

    model = _gpt_model(opts)
    merge_run_lora(model, None)  # a run_gpt_classifier --lora_rank run's adapters, loaded
    if opts.model_type == "gpt_lm":
        return GptLmServingModule(model)
    corpus = ()
    if opts.bpe_corpus_file:
        with open(opts.bpe_corpus_file, encoding="utf-8") as f:
            corpus = [line.rstrip("\n") for line in f if line.strip()]
    if opts.model_type == "gpt_causal_lm":
        from bert_tf.export.gpt_lm import gpt_causal_lm_serving_module

        # (the module switches this private model's KV-cache writes to core ops for good)
        return gpt_causal_lm_serving_module(model, opts.encoder_path, opts.bpe_path, corpus)
    return gpt_classifier_serving_module(
        model, opts.seq_length, opts.label_list, opts.vocab_file or None, opts.do_lower_case,
        opts.max_text_length or None, opts.encoder_path, opts.bpe_path, corpus)


def build_export_module(opts: ExportOptions):
    """The tf.Module to save and its signatures: (module, {name: concrete function})."""
    from bert_tf.export.encoder import encoder_savedmodel_root
    from bert_tf.export.preprocessor import BertPreprocessor, HubPreprocessorExport
    from bert_tf.export.task_models import task_export_module
    from bert_tf.modeling import (BertClassifier, BertEncoder, BertMultipleChoice,
                                  BertSpanLabeler, BertTokenClassifier)
    from bert_tf.pretrained import load_bert

    t = opts.model_type
    if t in GPT_MODEL_TYPES:
        module = _gpt_export_module(opts)
        return module, module.serving_signatures()
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

    def load():
        return load_bert(opts.bert_config_file,
                         vocab_file=None if t == "encoder" else opts.vocab_file,
                         init_checkpoint=opts.init_checkpoint or None,
                         do_lower_case=opts.do_lower_case, model_factory=factories[t],
                         heads=heads)[2]

    model = load() if t == "encoder" else _load_fine_tuned(load, opts, f"a {t}", "bert/")
    merge_run_lora(model, opts.init_checkpoint, heads)  # a --lora_rank run: adapters merged
    if opts.quantize == "int8" and opts.export_format == "savedmodel":
        from bert_tf.export.quantize import quantize_int8_weights

        quantize_int8_weights(model)
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
    from bert_tf.export.serving_module import save_serving_savedmodel

    validate_options(opts)
    module, signatures = build_export_module(opts)
    if opts.export_format == "tflite":
        return _write_tflite(opts, module, signatures)
    return save_serving_savedmodel(module, opts.export_dir, opts.version, opts.overwrite,
                                   signatures=signatures, check=check)


def _write_tflite(opts: ExportOptions, module, signatures) -> str:
    """Converts the token-id signature and writes <export_dir>/<version>/model.tflite
    atomically (the folder appears complete or not at all)."""
    from bert_tf.export.lite import TFLITE_FILE, tflite_from_signatures
    from bert_tf.export.savedmodel_io import write_atomically

    content = tflite_from_signatures(module, signatures, opts.quantize or None)

    def write(folder: str) -> None:
        with open(os.path.join(folder, TFLITE_FILE), "wb") as f:
            f.write(content)

    target = os.path.join(opts.export_dir, str(int(str(opts.version))))
    return write_atomically(target, write, overwrite=opts.overwrite)
