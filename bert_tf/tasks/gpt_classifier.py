"""GPT-1 fine-tuning as the paper does it, through bert_tf's task readers, metrics and loop.

The rows come from the same readers BERT's scripts use (`bert_tf.tasks.glue` processors for the
GLUE tasks and IMDb, `bert_tf.tasks.multiple_choice.read_swag_examples` for SWAG-layout csv,
`read_rocstories` here for the ROCStories cloze csv), are encoded by the original BPE
`TextEncoder` or a WordPiece vocabulary, and become fixed-length `n_ctx` sequences by the paper's
traversal transformations (`bert_tf.gpt.input_transforms`):

  classification (CoLA, SST-2, IMDb)            [start; text; extract]
  entailment (MNLI, QNLI, RTE, WNLI, XNLI)      [start; premise; delim; hypothesis; extract]
  similarity (MRPC, QQP, STS-B)                 both orders, extract states summed
  multiple choice (SWAG, ROCStories)            [start; context; delim; choice; extract] per
                                                choice, softmax over the choices

The model is `GptClassifier` (`lm_coef` weighs the auxiliary LM loss: L = L_clf + lm_coef·L_lm;
0 turns it off; `clf_pdrop` on the extract states), trained by the shared strategy-aware loop
`bert_tf.training.finetuning.train_model` (checkpoints model.ckpt-N with Adam slots and dropout
streams; a run resumes from output_dir) with the original `OpenAIAdam` (L2 inside the step,
`vector_l2`, warmup_linear schedule, global-norm clip). Dev metrics are the official ones
(`bert_tf.evaluation.glue_metrics`; accuracy for the multiple-choice tasks).

STS-B is a regression: the similarity transformation with a one-unit head (the predicted
score), trained with the squared error (+ lm_coef · LM loss) and evaluated with Pearson and
Spearman correlations (`glue_metrics`), as run_classifier.py does for BERT.

Your own data: `--task_name=csv|tsv|jsonl` reads your files exactly as run_classifier does
(`bert_tf.tasks.own_data`: `--train_file/--dev_file/--test_file` or `--data_dir`,
`--text_a_column`, `--text_b_column`, `--label_column`, `--has_header`,
`--task_type=regression`); one text is the classification transformation, a pair the
entailment one (`--pair_transform=similarity`: both orders, for symmetric pairs). The label set
is the training file's (sorted), written to `output_dir/labels.json` and into the export.

test_results.tsv prints each probability (or score) as `str` of a float32, as run_classifier.py
does.
"""
from __future__ import annotations

import csv
import dataclasses
import math
import os
import random
from typing import Sequence

import numpy as np
from absl import logging

from bert_tf import io_utils
from bert_tf.errors import UserInputError
from bert_tf.gpt.config import GptConfig
from bert_tf.gpt.input_transforms import (InputTransformError, SpecialTokens,
                                          classification_inputs, entailment_inputs,
                                          multiple_choice_inputs, similarity_inputs)
from bert_tf.training.openai_adam import OpenAIAdamOptions
from bert_tf.options import option
from bert_tf.tasks import own_data
from bert_tf.tasks.glue import EvalSplit
from bert_tf.training.accumulation import MemoryOptions
from bert_tf.training.lora_finetuning import LoraOptions
from bert_tf.training.distribution import DistributionOptions
from bert_tf.training.precision import (FINETUNING_PRECISION_POLICIES,
                                        runs_under_precision_policy)

TASK_KINDS = {
    "cola": "classification", "sst-2": "classification", "imdb": "classification",
    "mrpc": "similarity", "qqp": "similarity", "sts-b": "similarity",
    "mnli": "entailment", "qnli": "entailment", "rte": "entailment", "wnli": "entailment",
    "xnli": "entailment",
    "swag": "multiple_choice", "rocstories": "multiple_choice",
}
"""--task_name -> the paper's input transformation."""

REGRESSION_TASKS = ("sts-b",)
"""Tasks whose label is a score (one output unit, squared error, correlation metrics)."""

MULTIPLE_CHOICE_FILES = {
    "swag": {"train": "train.csv", "dev": "val.csv", "test": "test.csv"},
    "rocstories": {"train": "train.csv", "dev": "dev.csv", "test": "test.csv"},
}
"""Files under --data_dir of the multiple-choice tasks (csv)."""


class GptTaskDataError(UserInputError):
    """A task file or row GPT fine-tuning cannot use (names file/line or flag)."""


@dataclasses.dataclass
class TaskRows:
    """One split of a task as text: `parts` per row (1 text, 2 texts, or context + choices),
    `labels` int per row (float32 scores for a regression; 0 for unlabelled test rows), `source`
    (file or split name for messages) and the original examples (for the result files)."""

    name: str
    source: str
    texts: list[list[str]]
    choices: list[list[str]] | None
    labels: np.ndarray
    examples: list
    leaderboard_name: str | None = None


# ---------------------------------------------------------------------------------------------
# Readers
# ---------------------------------------------------------------------------------------------
def read_rocstories(path: str, require_label: bool = True) -> list[dict]:
    """Reads a ROCStories cloze csv as the original's `_rocstories` does: a header line, then
    `InputStoryid, InputSentence1..4, RandomFifthSentenceQuiz1, RandomFifthSentenceQuiz2,
    AnswerRightEnding` (1 or 2). Returns [{"id", "story" (the 4 sentences joined by spaces),
    "endings" [2], "label" (0/1 or None), "line"}].

    Raises GptTaskDataError naming file and line for a short row, an empty ending or a bad label.
    """
    try:
        f = io_utils.open_file(path, encoding="utf-8-sig", newline="")
    except OSError as e:
        raise GptTaskDataError(f"cannot read ROCStories file {path}: {e}") from None
    rows = []
    with f:
        for line_num, row in enumerate(csv.reader(f), start=1):
            if line_num == 1 or not row or not any(cell.strip() for cell in row):
                continue  # header, blank line
            if len(row) < 7:
                raise GptTaskDataError(
                    f"{path}:{line_num}: {len(row)} columns, expected at least 7 (InputStoryid, "
                    "4 story sentences, 2 endings[, AnswerRightEnding])")
            endings = [row[5].strip(), row[6].strip()]
            for k, ending in enumerate(endings):
                if not ending:
                    raise GptTaskDataError(f"{path}:{line_num}: ending {k + 1} "
                                           f"(RandomFifthSentenceQuiz{k + 1}) is missing")
            label = None
            if len(row) >= 8 and row[7].strip():
                if row[7].strip() not in ("1", "2"):
                    raise GptTaskDataError(f"{path}:{line_num}: AnswerRightEnding "
                                           f"{row[7]!r} is not 1 or 2")
                label = int(row[7]) - 1
            elif require_label:
                raise GptTaskDataError(f"{path}:{line_num}: AnswerRightEnding is missing")
            rows.append({"id": row[0], "story": " ".join(c.strip() for c in row[1:5]),
                         "endings": endings, "label": label, "line": line_num})
    if not rows:
        raise GptTaskDataError(f"{path} holds no stories")
    return rows


def _multiple_choice_rows(task: str, data_dir: str, split: str) -> TaskRows:
    path = os.path.join(data_dir, MULTIPLE_CHOICE_FILES[task][split])
    labelled = split != "test"
    if task == "swag":
        from bert_tf.tasks.multiple_choice import read_swag_examples
        examples = read_swag_examples(path, require_label=labelled)
        for e in examples:
            missing = [k for k, ending in enumerate(e.endings) if not str(ending).strip()]
            if missing:
                raise GptTaskDataError(f"{path}:{e.line}: ending{missing[0]} is missing (every "
                                       "row needs all its choices)")
        texts = [[e.context_sentence] for e in examples]
        choices = [e.choice_texts() for e in examples]
        labels = [e.label if e.label is not None else 0 for e in examples]
    else:
        examples = read_rocstories(path, require_label=labelled)
        texts = [[r["story"]] for r in examples]
        choices = [r["endings"] for r in examples]
        labels = [r["label"] if r["label"] is not None else 0 for r in examples]
    return TaskRows(split, path, texts, choices, np.asarray(labels, np.int32), examples)


def _glue_rows(processor, split, label_list) -> TaskRows:
    texts, labels = [], []
    for e in split.examples:
        texts.append([e.text_a] + ([e.text_b] if e.text_b is not None else []))
        if processor.is_regression:
            labels.append(float(e.label) if e.label is not None else 0.0)
        else:
            labels.append(label_list.index(e.label) if e.label is not None else 0)
    dtype = np.float32 if processor.is_regression else np.int32
    return TaskRows(split.name, f"{processor.name} {split.name}", texts, None,
                    np.asarray(labels, dtype), split.examples, split.leaderboard_name)


# ---------------------------------------------------------------------------------------------
# Encoding + transformations
# ---------------------------------------------------------------------------------------------
def _row_location(rows: TaskRows, message: str) -> str:
    """" (example <guid>, line <n>)" for the row an InputTransformError names, else ""."""
    import re
    match = re.search(r"\brow (\d+)", message)
    if not match or int(match.group(1)) >= len(rows.examples):
        return ""
    example = rows.examples[int(match.group(1))]
    if isinstance(example, dict):  # ROCStories
        return f" line {example['line']}"
    if hasattr(example, "line"):  # SWAG
        return f" line {example.line}"
    return f" (example {example.guid}, line/id {example.index})"


def transform_rows(rows: TaskRows, kind: str, encoder, n_ctx: int, special: SpecialTokens,
                   max_len: int | None = None) -> dict[str, np.ndarray]:
    """Encodes the texts and applies the task's transformation.

    Returns {"token_ids": int32, "mask": float32 ([N, n_ctx] or [N, C, n_ctx]), "label_ids":
    int32 [N]}. Raises GptTaskDataError naming the split and row for a sequence longer than
    n_ctx (with the flags that fix it) or a row of the wrong shape.
    """
    def encode(texts: Sequence[str]) -> list[list[int]]:
        return encoder.encode(list(texts), verbose=False)

    try:
        if kind == "multiple_choice":
            contexts = encode([t[0] for t in rows.texts])
            n = len(rows.choices[0]) if rows.choices else 0
            flat = encode([c for row in rows.choices for c in row])
            if any(len(row) != n for row in rows.choices):
                raise InputTransformError("rows have different numbers of choices")
            choices = [flat[i * n:(i + 1) * n] for i in range(len(rows.choices))]
            out = multiple_choice_inputs(contexts, choices, n_ctx, special, max_len)
        elif kind == "classification":
            out = classification_inputs(encode([t[0] for t in rows.texts]), n_ctx, special,
                                        max_len)
        else:
            short = [i for i, t in enumerate(rows.texts) if len(t) < 2]
            if short:
                raise InputTransformError(f"row {short[0]}: the {kind} task needs two texts")
            a, b = encode([t[0] for t in rows.texts]), encode([t[1] for t in rows.texts])
            fn = entailment_inputs if kind == "entailment" else similarity_inputs
            out = fn(a, b, n_ctx, special, max_len)
    except InputTransformError as e:
        where = _row_location(rows, str(e))
        raise GptTaskDataError(
            f"{rows.source}{where}: {e} (--max_seq_length={n_ctx}; --max_text_length is that "
            "max_len)") from None
    return {"token_ids": out.token_ids.astype(np.int32), "mask": out.mask.astype(np.float32),
            "label_ids": rows.labels}


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass(kw_only=True)
class GptClassifierRunOptions(DistributionOptions, own_data.OwnDataOptions, LoraOptions,
                              MemoryOptions, OpenAIAdamOptions):
    """Every option of tools/run_gpt_classifier.py (named as run_classifier.py's flags where the
    meaning is the same, plus train.py's: --lm_coef, --clf_pdrop, --lr_schedule, --l2,
    --vector_l2, --max_grad_norm, --b1, --b2, --e). The paper's settings:
    official_configs/tasks/gpt_*.flags.

    Attributes:
      task_name: The name of the task to train (the GLUE tasks, xnli, imdb, swag, rocstories);
        or csv, tsv, jsonl: your own files (--train_file, --text_a_column, --label_column, ...;
        see docs/gpt.md).
      data_dir: The input data dir (the task's tsv files; swag: train.csv, val.csv, test.csv;
        rocstories: train.csv, dev.csv, test.csv in the ROCStories cloze layout; own data:
        train.<ext>, dev.<ext>, test.<ext> where no file flag is given).
      dev_file: Evaluate on this file instead of the task's dev set (own data: the dev file;
        a GLUE task: a tsv in its train/dev layout).
      pair_transform: --task_name=csv|tsv|jsonl with --text_b_column: the paper's transformation
        of the pair: entailment (ordered: premise, delim, hypothesis) or similarity (both
        orders, summed; symmetric pairs).
      gpt_config_file: GptConfig JSON of the pretrained model (n_vocab must cover the encoder).
      output_dir: The output directory where the model checkpoints, results and predictions will
        be written (a run resumes from its latest checkpoint).
      encoder_path: The original BPE encoder (encoder_bpe_40000.json); with --bpe_path.
      bpe_path: The original BPE merges (vocab_40000.bpe); with --encoder_path.
      vocab_file: A WordPiece vocab instead of the BPE (the BERT paper's LTR model).
      do_lower_case: With --vocab_file: lower-case the input text.
      init_checkpoint: Pretrained weights: an original GPT-1 params folder (params_shapes.json +
        params_0..9.npy) or a GPT pretraining checkpoint of ours (ckpt-N or its folder).
      max_seq_length: n_ctx of the fine-tuning sequences (<= the config's n_ctx); a longer row is
        an error unless --max_text_length cuts it.
      max_text_length: Cut every text to its first N tokens before the transformation (the
        original's transform_roc uses n_ctx // 2 - 2); 0 = never cut.
      do_train: Whether to run training.
      do_eval: Whether to run eval on the dev set.
      do_predict: Whether to run the model in inference mode on the test set.
      train_batch_size: Total batch size for training.
      eval_batch_size: Total batch size for eval.
      predict_batch_size: Total batch size for predict.
      learning_rate: The peak learning rate (train.py's --lr).
      num_train_epochs: Total number of training epochs to perform.
      warmup_proportion: Warm-up as a fraction of training (train.py's --lr_warmup; the paper:
        0.002).
      lr_schedule: train.py's --lr_schedule.
      lm_coef: Weight of the auxiliary LM loss (train.py's --lm_coef; 0 turns it off).
      clf_pdrop: Dropout on the classifier input (train.py's --clf_pdrop); default: the
        config's clf_pdrop.
      l2: train.py's --l2: L2 weight inside the Adam step.
      vector_l2: train.py's --vector_l2.
      max_grad_norm: train.py's --max_grad_norm (the shared loop always clips; > 0).
      b1: Adam beta1.
      b2: Adam beta2.
      e: Adam epsilon.
      save_checkpoints_steps: How often to save the model checkpoint.
      keep_checkpoint_max: How many recent checkpoints to keep.
      seed: Seed of the example shuffle, input pipeline, new weights and dropout.
      length_bucketing: Cut each training, evaluation and prediction batch to its longest
        example, rounded up to a multiple of 8 (the same results up to float rounding, faster
        on short examples). False: every batch at max_seq_length, the original's fixed shapes.
      export_dir: Also export the fine-tuned classifier as a serving SavedModel
        <export_dir>/1 (raw-text serving_default with the in-graph WordPiece or BPE encoder;
        serving_ids always).
    """

    task_name: str
    data_dir: str | None = None
    dev_file: str | None = None
    pair_transform: str = option("entailment", choices=("entailment", "similarity"))
    gpt_config_file: str
    output_dir: str
    encoder_path: str | None = None
    bpe_path: str | None = None
    vocab_file: str | None = None
    do_lower_case: bool = True
    init_checkpoint: str | None = None
    max_seq_length: int = 128
    max_text_length: int = 0
    do_train: bool = False
    do_eval: bool = False
    do_predict: bool = False
    train_batch_size: int = 32
    eval_batch_size: int = 8
    predict_batch_size: int = 8
    learning_rate: float = 6.25e-5
    num_train_epochs: float = 3.0
    warmup_proportion: float = 0.002
    lm_coef: float = 0.5
    clf_pdrop: float | None = None
    save_checkpoints_steps: int = 1000
    keep_checkpoint_max: int = 5
    seed: int = 12345
    length_bucketing: bool = True
    export_dir: str | None = None
    lora_targets: list[str] = option(
        ["c_attn"], "LoRA: the GPT-1 layers to adapt, by name (c_attn: the fused query/key/value "
        "projection; c_proj, c_fc) or Keras-path pattern (*/h11/attn/c_attn).")


def _check_options(opts: GptClassifierRunOptions) -> str:
    if not (opts.do_train or opts.do_eval or opts.do_predict):
        raise UserInputError("At least one of `do_train`, `do_eval` or `do_predict' must be True.")
    task = opts.task_name.strip().lower()
    if own_data.is_own_data_task(task):
        if opts.text_b_column is None and opts.pair_transform != "entailment":
            raise UserInputError(f"--pair_transform={opts.pair_transform} needs a pair "
                                 "(--text_b_column)")
    else:
        if task not in TASK_KINDS:
            from bert_tf.tasks.glue import canonical_task_name
            try:
                task = canonical_task_name(task)
            except UserInputError:
                raise UserInputError(f"--task_name={opts.task_name}: expected one of "
                                     f"{', '.join(sorted(TASK_KINDS))}, or csv, tsv, jsonl "
                                     "(your own files)") from None
        own_data.check_unused_flags(opts)
        if opts.pair_transform != "entailment":
            raise UserInputError(f"--pair_transform only applies to --task_name=csv|tsv|jsonl "
                                 f"(got --task_name={opts.task_name})")
        if not opts.data_dir:
            raise UserInputError(f"--task_name={opts.task_name} needs --data_dir")
        if opts.dev_file and task in MULTIPLE_CHOICE_FILES:
            raise UserInputError(f"--dev_file does not apply to --task_name={task} (its files "
                                 "are found in --data_dir)")
    for name in ("lm_coef", "warmup_proportion", "max_text_length"):
        if getattr(opts, name) < 0:
            raise UserInputError(f"--{name}={getattr(opts, name)} must be >= 0")
    opts.check_lr_schedule()
    if not opts.max_grad_norm > 0:
        raise UserInputError(f"--max_grad_norm={opts.max_grad_norm}: the fine-tuning loop "
                             "always clips the gradients; give a positive norm")
    if opts.clf_pdrop is not None and not 0 <= opts.clf_pdrop < 1:
        raise UserInputError(f"--clf_pdrop={opts.clf_pdrop} must be in [0, 1)")
    for name in ("data_dir", "output_dir", "train_file", "dev_file", "test_file"):
        io_utils.check_path(getattr(opts, name, None), f"--{name}")
    return task


def own_task_kind(opts: GptClassifierRunOptions) -> str:
    """The paper's transformation of own data: classification (one text) or `pair_transform`."""
    return "classification" if opts.text_b_column is None else opts.pair_transform


def build_text_encoder(opts: GptClassifierRunOptions, config: GptConfig):
    """The BPE `TextEncoder` (--encoder_path/--bpe_path) or `WordPieceTextEncoder`
    (--vocab_file); its vocabulary must fit the config's n_vocab."""
    from bert_tf.pretraining_data.gpt_lm import EncoderSpec
    spec = EncoderSpec(encoder_path=opts.encoder_path, bpe_path=opts.bpe_path,
                       vocab_file=opts.vocab_file, do_lower_case=opts.do_lower_case)
    spec.validate()
    encoder = spec.build()
    if len(encoder.encoder) > config.n_vocab:
        flag = "--vocab_file" if opts.vocab_file else "--encoder_path"
        raise UserInputError(f"{flag}: the vocabulary has {len(encoder.encoder)} tokens but "
                             f"{opts.gpt_config_file} has n_vocab={config.n_vocab}")
    return encoder


def _load_splits(task: str, opts: GptClassifierRunOptions) -> tuple[dict, list[str] | None]:
    """{"train": TaskRows, "dev": [TaskRows], "test": [TaskRows]} for the asked-for runs, and
    the label names (None for multiple choice)."""
    splits: dict = {"train": None, "dev": [], "test": []}
    if task in MULTIPLE_CHOICE_FILES:
        if opts.do_train:
            splits["train"] = _multiple_choice_rows(task, opts.data_dir, "train")
        if opts.do_eval:
            splits["dev"] = [_multiple_choice_rows(task, opts.data_dir, "dev")]
        if opts.do_predict:
            splits["test"] = [_multiple_choice_rows(task, opts.data_dir, "test")]
        return splits, None
    from bert_tf.tasks import glue
    processor = glue.get_processor(task)
    labels = processor.get_labels()
    examples = None
    if opts.do_train:
        examples = processor.get_train_examples(opts.data_dir, opts.dev_file)
        random.Random(opts.seed).shuffle(examples)
    return _processor_rows(processor, opts, examples, labels), labels


def _processor_rows(processor, opts: GptClassifierRunOptions, train_examples: list | None,
                    labels: list[str] | None) -> dict:
    """{"train": TaskRows or None, "dev": [TaskRows], "test": [TaskRows]} of a GLUE-style
    processor: the (shuffled) training examples given, dev/test read for the asked-for runs."""
    splits: dict = {"train": None, "dev": [], "test": []}
    if train_examples is not None:
        splits["train"] = _glue_rows(processor, EvalSplit("train", train_examples), labels)
    if opts.do_eval:
        splits["dev"] = [_glue_rows(processor, s, labels)
                         for s in processor.get_dev_splits(opts.data_dir, opts.dev_file)]
    if opts.do_predict:
        splits["test"] = [_glue_rows(processor, s, labels)
                          for s in processor.get_test_splits(opts.data_dir)]
    return splits


def load_own_splits(opts: GptClassifierRunOptions
                    ) -> tuple[dict, list[str] | None, own_data.OwnDataProcessor]:
    """`--task_name=csv|tsv|jsonl`: the splits, the label names (None for a regression) and the
    processor. The label set is the training file's (an existing `output_dir/labels.json` must
    agree), else `output_dir/labels.json`'s; a dev/test label outside it is an error naming
    file, line and column. Nothing is written here."""
    processor = own_data.processor_from_options(opts)
    train_examples = None
    if opts.do_train:
        train_examples = processor.get_train_examples(opts.data_dir)
        random.Random(opts.seed).shuffle(train_examples)
    own_data.resolve_labels(processor, opts.output_dir, training=opts.do_train)
    labels = processor.get_labels()
    return _processor_rows(processor, opts, train_examples, labels), labels, processor


def format_probabilities(probabilities: np.ndarray) -> list[str]:
    """test_results.tsv lines: each value as `str` of a float32, tab-separated (the format of
    run_classifier.py's file: the shortest decimal that reads back as the same float32)."""
    rows = np.asarray(probabilities, np.float64).astype(np.float32)
    if rows.ndim == 1:
        return [str(value) + "\n" for value in rows]
    return ["\t".join(str(p) for p in row) + "\n" for row in rows]


def _predict_logits(model, arrays: dict, batch_size: int, strategy,
                    length_bucketing: bool = True) -> np.ndarray:
    """Logits [N, ...] in example order. On one replica with `length_bucketing`, length-aware:
    length-sorted batches cut to their longest "mask" row (a causal model's real positions do
    not see the padding after them: the same logits up to float rounding,
    `training.length_batching.predict_length_bucketed`); otherwise every batch at full length
    across the replicas (`predict_arrays`)."""
    from bert_tf.training.finetuning import predict_arrays

    if length_bucketing and strategy.num_replicas_in_sync == 1:
        from bert_tf.training.length_batching import predict_length_bucketed

        return predict_length_bucketed(model, arrays, batch_size, ["logits"],
                                       input_keys=("token_ids",), mask_key="mask")["logits"]
    return predict_arrays(model, arrays, batch_size, ["logits"],
                          input_keys=("token_ids",))["logits"]


def _suffix(name: str) -> str:
    """File-name suffix of a split, as run_classifier's: "" or "_mismatched" (MNLI)."""
    return "_mismatched" if name.endswith("mismatched") else ""


def _served_texts(splits: dict, limit: int = 5000) -> list[str]:
    """Up to `limit` texts of the task (for the in-graph BPE's chunk table)."""
    texts: list[str] = []
    for rows in [splits["train"], *splits["dev"], *splits["test"]]:
        if rows is None:
            continue
        for parts in rows.texts:
            texts.extend(parts)
        for choices in rows.choices or []:
            texts.extend(choices)
    return texts[:limit]


@runs_under_precision_policy(FINETUNING_PRECISION_POLICIES)
def run_gpt_classifier(opts: GptClassifierRunOptions) -> dict:
    """One run of tools/run_gpt_classifier.py: optional fine-tuning, evaluation, prediction.

    Returns {"task", "kind", "train": train_model's result or None, "eval": {split: metrics},
    "predict": {split: path}}. Writes model.ckpt-N, train/ (TensorBoard), curves.png,
    eval_results[_<split>].txt (official metrics, eval_loss, global_step) and
    test_results[_<split>].tsv (class / choice probabilities per line; the score for STS-B).
    """
    task = _check_options(opts)
    own = own_data.is_own_data_task(task)
    kind = own_task_kind(opts) if own else TASK_KINDS[task]
    config = GptConfig.from_json_file(opts.gpt_config_file)
    if opts.max_seq_length > config.n_ctx:
        raise UserInputError(f"--max_seq_length={opts.max_seq_length} is longer than n_ctx="
                             f"{config.n_ctx} in {opts.gpt_config_file}")
    if opts.clf_pdrop is not None:
        config = dataclasses.replace(config, clf_pdrop=opts.clf_pdrop)
    special = SpecialTokens.for_config(config)
    if opts.export_dir:
        from bert_tf.export.savedmodel_io import existing_versions
        if 1 in existing_versions(opts.export_dir):
            raise UserInputError(f"--export_dir={opts.export_dir}: version 1 exists; refusing to "
                                 "overwrite it (give another folder)")
    encoder = build_text_encoder(opts, config)
    processor = None
    if own:
        splits, labels, processor = load_own_splits(opts)
    else:
        splits, labels = _load_splits(task, opts)
    max_len = opts.max_text_length or None

    def arrays_of(rows: TaskRows) -> dict[str, np.ndarray]:
        return transform_rows(rows, kind, encoder, opts.max_seq_length, special, max_len)

    # Every split is transformed before training, so a bad row fails before any work.
    train_arrays = arrays_of(splits["train"]) if splits["train"] is not None else None
    dev_arrays = [(rows, arrays_of(rows)) for rows in splits["dev"]]
    test_arrays = [(rows, arrays_of(rows)) for rows in splits["test"]]

    import keras

    from bert_tf.runs.gpt_pretraining import load_gpt_weights
    from bert_tf.gpt.task_model import GptClassifier
    from bert_tf.tasks.results import softmax, write_eval_results
    from bert_tf.training.distribution import resolve_strategy
    from bert_tf.training.finetuning import (FinetuneOptions, latest_checkpoint, load_checkpoint,
                                             num_train_and_warmup_steps, train_model)

    strategy = resolve_strategy(opts)
    io_utils.makedirs(opts.output_dir)
    if processor is not None and opts.do_train:
        own_data.write_labels(processor, opts.output_dir)
    keras.utils.set_random_seed(opts.seed)
    regression = processor.is_regression if processor is not None else task in REGRESSION_TASKS
    metrics_task = processor.metrics_task if processor is not None else task
    with strategy.scope():
        model = GptClassifier(config, task=kind, num_classes=len(labels) if labels else None,
                              lm_coef=opts.lm_coef, regression=regression,
                              name="gpt_classifier")
    latest = latest_checkpoint(opts.output_dir)
    if latest:  # a fine-tuning checkpoint (train_model resumes from it; eval/predict use it)
        load_checkpoint(model, latest, heads="required")
    elif opts.init_checkpoint:
        kind_loaded = load_gpt_weights(model.transformer, opts.init_checkpoint)
        logging.info("Initialised the transformer from %s (%s)", opts.init_checkpoint,
                     kind_loaded)
    else:
        logging.warning("no --init_checkpoint: fine-tuning a randomly initialised GPT")
    result: dict = {"task": task, "kind": kind, "train": None, "eval": None, "predict": None}
    global_step = 0
    if latest:
        from bert_tf.checkpoints import checkpoint_global_step
        global_step = checkpoint_global_step(latest) or 0

    if train_arrays is not None:
        n = len(train_arrays["label_ids"])
        num_train_steps, num_warmup_steps = num_train_and_warmup_steps(
            n, opts.train_batch_size, opts.num_train_epochs, opts.warmup_proportion)
        logging.info("***** Running training *****")
        logging.info("  Num examples = %d, batch size = %d, num steps = %d, lm_coef = %g", n,
                     opts.train_batch_size, num_train_steps, opts.lm_coef)
        options = FinetuneOptions(
            output_dir=opts.output_dir, learning_rate=opts.learning_rate,
            num_train_steps=num_train_steps, num_warmup_steps=num_warmup_steps,
            train_batch_size=opts.train_batch_size, clip_norm=opts.max_grad_norm,
            save_checkpoints_steps=opts.save_checkpoints_steps,
            keep_checkpoint_max=opts.keep_checkpoint_max, seed=opts.seed,
            length_bucketing=opts.length_bucketing,
            gradient_accumulation_steps=opts.gradient_accumulation_steps,
            recompute_activations=opts.recompute_activations, lora_rank=opts.lora_rank,
            lora_alpha=opts.lora_alpha, lora_targets=list(opts.lora_targets),
            lora_dropout=opts.lora_dropout)

        def optimizer_fn():
            # The loop clips the summed gradients to --max_grad_norm (once).
            return opts.loop_clipped_optimizer(opts.learning_rate, t_total=num_train_steps,
                                               warmup=opts.warmup_proportion)

        def loss_fn(outputs, batch):
            return model.compute_losses(outputs, batch["token_ids"], batch["mask"],
                                        batch["label_ids"])["train_loss"]

        result["train"] = train_model(model, train_arrays, loss_fn, options,
                                      input_keys=("token_ids",), strategy=strategy,
                                      optimizer_fn=optimizer_fn, length_key="mask")
        global_step = result["train"]["global_step"]

    if dev_arrays:
        from bert_tf.evaluation.glue_metrics import glue_metrics
        from bert_tf.tasks.multiple_choice import evaluate_logits
        result["eval"] = {}
        for rows, arrays in dev_arrays:
            logging.info("***** Running evaluation: %s (%d examples) *****", rows.name,
                         len(rows.labels))
            logits = _predict_logits(model, arrays, opts.eval_batch_size, strategy,
                                     opts.length_bucketing)
            label_ids = arrays["label_ids"]
            if kind == "multiple_choice":
                metrics = evaluate_logits(logits, label_ids)
                metrics = {"accuracy": metrics["accuracy"], "eval_loss": metrics["loss"]}
            elif regression:  # Pearson / Spearman of the predicted scores, squared-error loss
                scores = logits[:, 0].astype(np.float64)
                metrics = {k: float(v) for k, v in
                           glue_metrics(metrics_task, scores,
                                        label_ids.astype(np.float64)).items()}
                metrics["eval_loss"] = float(np.mean(np.square(scores - label_ids)))
            else:
                metrics = {k: float(v) for k, v in
                           glue_metrics(metrics_task, logits.argmax(-1), label_ids).items()}
                picked = softmax(logits)[np.arange(len(label_ids)), label_ids]
                metrics["eval_loss"] = float(-np.mean(np.log(np.maximum(picked, 1e-30))))
            metrics["global_step"] = int(global_step)
            path = os.path.join(opts.output_dir, f"eval_results{_suffix(rows.name)}.txt")
            write_eval_results(path, metrics)
            logging.info("Eval results %s: %s", rows.name, metrics)
            if any(isinstance(v, float) and math.isnan(v) for v in metrics.values()):
                logging.warning("%s: some metric is nan", rows.name)
            result["eval"][rows.name] = metrics

    if test_arrays:
        from bert_tf.io_utils import atomic_write_text
        result["predict"] = {}
        for rows, arrays in test_arrays:
            logits = _predict_logits(model, arrays, opts.predict_batch_size, strategy,
                                     opts.length_bucketing)
            path = os.path.join(opts.output_dir, f"test_results{_suffix(rows.name)}.tsv")
            # str() of float32 values, as run_classifier.py's file
            if regression:  # one predicted score per line, as run_classifier.py's STS-B file
                lines = format_probabilities(logits[:, 0])
            else:
                lines = format_probabilities(softmax(logits))
            atomic_write_text(path, "".join(lines))
            logging.info("Wrote %d predictions to %s", len(logits), path)
            result["predict"][rows.name] = path

    if opts.export_dir:
        from bert_tf.export.gpt import export_gpt_classifier_savedmodel
        from bert_tf.modeling.lora import merge_lora
        merge_lora(model)  # LoRA: adapters folded into the kernels, none served ([] without)
        result["export_dir"] = export_gpt_classifier_savedmodel(
            model, opts.export_dir, 1, seq_length=opts.max_seq_length, label_list=labels,
            vocab_file=opts.vocab_file, do_lower_case=opts.do_lower_case,
            max_text_length=opts.max_text_length or None, encoder_path=opts.encoder_path,
            bpe_path=opts.bpe_path, bpe_corpus=_served_texts(splits))
        logging.info("Exported the classifier SavedModel to %s", result["export_dir"])
    return result
