"""SWAG (Situations With Adversarial Generations) multiple choice with BERT: reading the csv files,
packing one `[CLS] context [SEP] ending [SEP]` input per choice, the softmax loss over the choices,
accuracy and the predictions file.

Data flow: `read_swag_examples` → `convert_examples_to_features` (int32 [N, 4, max_seq_length]
arrays) → `BertMultipleChoice` (a score per choice from its pooled [CLS] vector; logits
[N, 4]) → `multiple_choice_loss` (softmax cross-entropy over the four choices) / `accuracy` →
`write_predictions`. `run_swag` drives a whole `tools/run_swag.py` invocation.

The paper (section 4.4): "we construct four input sequences, each containing the concatenation of
the given sentence (sentence A) and a possible continuation (sentence B). The only task-specific
parameters introduced is a vector whose dot product with the [CLS] token representation C
denotes a score for each choice which is normalized with a softmax layer." Here sentence A is
`sent1` and sentence B is `sent2 + " " + ending<i>` (`sent2` is the start of the continuation
shared by the four endings). A pair longer than `max_seq_length - 3` WordPiece tokens is
truncated as the original `truncate_seq_pair` does (the longer segment loses its last token
first); truncations are counted in the log.

File format (swagaf `data/{train,val,test}.csv`): a header line
`,video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label`
(the first, unnamed column is the row index; `test.csv` has no `label`), then one csv row per
question. Columns are found by name, so the unnamed index column may be absent.
"""
from __future__ import annotations

import csv
import dataclasses
import os
import random
from typing import Sequence

from absl import logging

from bert_tf import io_utils
from bert_tf.errors import UserInputError
from bert_tf.options import option
from bert_tf.tokenization.packing import pack_tokens
from bert_tf.tasks.results import softmax, write_eval_results, write_train_results
from bert_tf.tasks.run_options import EvaluatingRunOptions
from bert_tf.tasks.run_checks import (check_common_options, check_modes_and_files,
                                      files_from_data_dir)
from bert_tf.training.precision import (FINETUNING_PRECISION_POLICIES,
                                        runs_under_precision_policy)

NUM_CHOICES = 4
REQUIRED_COLUMNS = ("sent1", "sent2", *(f"ending{i}" for i in range(NUM_CHOICES)))


class SwagDataError(UserInputError):
    """A SWAG file or row that cannot be used (the message names the file and line)."""


@dataclasses.dataclass
class SwagExample:
    """One SWAG question.

    Attributes:
      example_id: the row's index column (the unnamed first column), or its row number from 0.
      context_sentence: `sent1`.
      start_ending: `sent2`, the start of every continuation.
      endings: `ending0` ... `ending3`.
      label: index of the right ending, or None (test files).
      line: 1-based line of the row in its file.
    """

    example_id: str
    context_sentence: str
    start_ending: str
    endings: list[str]
    label: int | None = None
    line: int = 0

    def choice_texts(self) -> list[str]:
        """Sentence B of every choice: `sent2 + " " + ending`."""
        return [f"{self.start_ending} {ending}".strip() for ending in self.endings]


def read_swag_examples(path: str | os.PathLike, require_label: bool) -> list[SwagExample]:
    """Reads a SWAG csv file (see the module docstring).

    Args:
      path: the file (UTF-8 csv with a header line).
      require_label: every row must have a `label` in 0..3 (training and evaluation). Otherwise
        labels are read when the file has the column and left None when it has not.

    Returns:
      The examples in file order.

    Raises:
      SwagDataError naming the file and line: missing columns, a row with the wrong number of
      fields, a missing or bad label.
    """
    source = os.fspath(path)
    try:
        # (a leading BOM is dropped)
        f = io_utils.open_file(source, encoding="utf-8-sig", newline="")
    except OSError as e:
        raise SwagDataError(f"cannot read SWAG file {source}: {e}") from e
    examples: list[SwagExample] = []
    with f:
        reader = csv.reader(f)
        try:
            header = next(reader)
        except StopIteration:
            raise SwagDataError(f"{source}: empty file (expected a csv header line)") from None
        except (csv.Error, UnicodeDecodeError) as e:
            raise SwagDataError(f"{source}:1: cannot read the csv header: {e}") from e
        columns = {name.strip(): i for i, name in enumerate(header)}
        missing = [c for c in REQUIRED_COLUMNS if c not in columns]
        if missing:
            raise SwagDataError(
                f"{source}:1: the header lacks {', '.join(missing)} (expected the SWAG columns "
                "video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,"
                f"ending3[,label]; got {','.join(header)})")
        has_label = "label" in columns
        if require_label and not has_label:
            raise SwagDataError(f"{source}:1: no `label` column; training and evaluation need "
                                "the label of every question")
        id_column = 0 if header and header[0].strip() == "" else None
        row_number = 0
        line = reader.line_num
        while True:
            try:
                row = next(reader)
            except StopIteration:
                break
            except (csv.Error, UnicodeDecodeError) as e:
                raise SwagDataError(f"{source}:{reader.line_num}: not a valid csv row: {e}") from e
            start_line = line + 1
            line = reader.line_num
            if not row or all(not field.strip() for field in row):
                continue
            if len(row) != len(header):
                raise SwagDataError(f"{source}:{start_line}: {len(row)} fields, the header has "
                                    f"{len(header)}")
            label = None
            if has_label:
                text = row[columns["label"]].strip()
                if text or require_label:
                    try:
                        label = int(text)
                    except ValueError:
                        label = -1
                    if not 0 <= label < NUM_CHOICES:
                        raise SwagDataError(f"{source}:{start_line}: label {text!r} is not one of "
                                            f"0..{NUM_CHOICES - 1}")
            example_id = row[id_column].strip() if id_column is not None else str(row_number)
            examples.append(SwagExample(
                example_id=example_id, context_sentence=row[columns["sent1"]],
                start_ending=row[columns["sent2"]],
                endings=[row[columns[f"ending{i}"]] for i in range(NUM_CHOICES)],
                label=label, line=start_line))
            row_number += 1
    if not examples:
        raise SwagDataError(f"{source}: no rows after the header")
    return examples


def convert_examples_to_features(examples: Sequence[SwagExample], tokenizer, max_seq_length: int,
                                 log_examples: int = 3) -> dict:
    """Packs every choice of every example as `[CLS] sent1 [SEP] sent2 ending [SEP]`.

    Args:
      examples: from `read_swag_examples`.
      tokenizer: a `FullTokenizer`.
      max_seq_length: length of each packed choice (>= 3).
      log_examples: log the tokens of this many first examples.

    Returns:
      {"input_word_ids", "input_mask", "input_type_ids"}: int32 [N, 4, max_seq_length], and
      "labels" int32 [N] (-1 for examples without a label).
    """
    import numpy as np

    if max_seq_length < 3:
        raise ValueError(f"max_seq_length must be >= 3, got {max_seq_length}")
    n = len(examples)
    ids = np.zeros((n, NUM_CHOICES, max_seq_length), np.int32)
    mask = np.zeros_like(ids)
    types = np.zeros_like(ids)
    labels = np.full((n,), -1, np.int32)
    truncated = 0
    for i, example in enumerate(examples):
        context_tokens = tokenizer.tokenize(example.context_sentence)
        for j, choice in enumerate(example.choice_texts()):
            packed = pack_tokens(context_tokens, tokenizer.tokenize(choice), max_seq_length,
                                 tokenizer.vocab)
            truncated += packed.truncated
            ids[i, j], mask[i, j], types[i, j] = (packed.input_ids, packed.input_mask,
                                                  packed.segment_ids)
            if i < log_examples:
                logging.info("swag example %s choice %d: %s", example.example_id, j,
                             " ".join(packed.tokens))
        if example.label is not None:
            labels[i] = example.label
    if truncated:
        logging.info("%d of %d choices were longer than max_seq_length=%d and were truncated "
                     "(longer segment first)", truncated, n * NUM_CHOICES, max_seq_length)
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types,
            "labels": labels}


def multiple_choice_loss(logits, labels):
    """Mean softmax cross-entropy over the choices.

    Args: logits float [batch, num_choices]; labels int [batch]. Returns a scalar float32.
    """
    import tensorflow as tf

    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
    labels = tf.reshape(tf.cast(labels, tf.int32), [-1])
    return -tf.reduce_mean(tf.gather(log_probs, labels, batch_dims=1))


def swag_loss_fn(outputs: dict, batch: dict):
    """`LossFn` for `bert_tf.training.finetuning.train_model`."""
    return multiple_choice_loss(outputs["logits"], batch["labels"])


def evaluate_logits(logits, labels) -> dict[str, float]:
    """Accuracy and mean loss of logits [N, C] against labels [N] (NumPy)."""
    import numpy as np

    probs = softmax(logits)
    labels = np.asarray(labels)
    picked = probs[np.arange(len(labels)), labels]
    return {"accuracy": float(np.mean(np.argmax(logits, axis=-1) == labels)),
            "loss": float(-np.mean(np.log(np.maximum(picked, 1e-30))))}


def write_predictions(path: str | os.PathLike, examples: Sequence[SwagExample], logits) -> None:
    """A tsv file: header `id  prediction  label  prob0..prob3`, one row per example (label empty
    when unknown). Written atomically."""
    from bert_tf.io_utils import atomic_output_path

    probs = softmax(logits)
    with atomic_output_path(path) as tmp:
        with io_utils.open_file(tmp, "w", encoding="utf-8") as f:
            f.write("\t".join(["id", "prediction", "label",
                               *(f"prob{i}" for i in range(NUM_CHOICES))]) + "\n")
            for example, p in zip(examples, probs):
                label = "" if example.label is None else str(example.label)
                f.write("\t".join([example.example_id, str(int(p.argmax())), label,
                                   *(f"{x:.6f}" for x in p)]) + "\n")


# ---------------------------------------------------------------------------------------------
# One run of tools/run_swag.py
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass
class SwagRunOptions(EvaluatingRunOptions):
    """Flags of tools/run_swag.py (the original scripts' names; defaults are the paper's SWAG
    setting: 3 epochs, learning rate 2e-5, batch size 16). `data_dir` fills the files not given
    (`DATA_DIR_FILES`)."""

    _: dataclasses.KW_ONLY
    data_dir: str | None = option(None, "Folder with SWAG's train.csv, val.csv, test.csv.")
    train_file: str | None = option(None, "Training csv; default data_dir/train.csv.")
    eval_file: str | None = option(None, "Evaluation csv; default data_dir/val.csv.")
    predict_file: str | None = option(None, "Prediction csv (label optional); default "
                                      "data_dir/test.csv.")
    max_seq_length: int = option(128, "WordPiece tokens per choice ([CLS] context [SEP] ending "
                                 "[SEP]); longer pairs are truncated.")
    train_batch_size: int = option(16, "Total batch size for training (questions).")
    learning_rate: float = option(2e-5, "The initial learning rate for Adam.")


DATA_DIR_FILES = {"train_file": "train.csv", "eval_file": "val.csv", "predict_file": "test.csv"}


def validate_options(opts: SwagRunOptions, config=None) -> None:
    """Flag checks (UserInputError naming the flag)."""
    check_modes_and_files(opts)
    check_common_options(opts, config)


@runs_under_precision_policy(FINETUNING_PRECISION_POLICIES)
def run_swag(opts: SwagRunOptions) -> dict:
    """One run of tools/run_swag.py: optional fine-tuning, evaluation and prediction.

    Writes into `opts.output_dir`: `model.ckpt-<step>` checkpoints (training);
    `eval_predictions.tsv` and `eval_results.txt` (`acc`, `eval_loss`, `num_examples`,
    `global_step`) for --do_eval; `test_predictions.tsv` (and `test_results.txt` when the file has labels)
    for --do_predict. Without --do_train, the latest checkpoint in `output_dir` is used if there
    is one, else --init_checkpoint.

    Returns: {"train": train_model's dict or None, "eval": metrics or None, "test": metrics or
    None}.
    """
    from bert_tf.tokenization import validate_case_matches_checkpoint

    opts = files_from_data_dir(opts, DATA_DIR_FILES)
    validate_options(opts)
    validate_case_matches_checkpoint(opts.do_lower_case, opts.init_checkpoint)
    train_examples = eval_examples = predict_examples = None
    if opts.do_train:
        train_examples = read_swag_examples(opts.train_file, require_label=True)
    if opts.do_eval:
        eval_examples = read_swag_examples(opts.eval_file, require_label=True)
    if opts.do_predict:
        predict_examples = read_swag_examples(opts.predict_file, require_label=False)

    import keras

    from bert_tf.modeling import BertConfig, BertMultipleChoice
    from bert_tf.pretrained import check_vocab_matches_config, load_tokenizer
    from bert_tf.training import finetuning
    from bert_tf.training.distribution import resolve_strategy

    config = BertConfig.from_json_file(opts.bert_config_file)
    validate_options(opts, config)
    check_vocab_matches_config(opts.vocab_file, config, opts.bert_config_file)
    tokenizer = load_tokenizer(opts.vocab_file, opts.do_lower_case)
    io_utils.makedirs(opts.output_dir)
    keras.utils.set_random_seed(opts.seed)
    strategy = resolve_strategy(opts)
    with strategy.scope():
        model = BertMultipleChoice(config, num_choices=NUM_CHOICES)
        finetuning.init_model(model, None)  # built under the strategy's scope
    result: dict = {"train": None, "eval": None, "test": None}
    global_step = None

    if opts.do_train:
        if finetuning.latest_checkpoint(opts.output_dir):
            logging.info("%s holds a checkpoint: training resumes from it (--init_checkpoint "
                         "only seeds a fresh run)", opts.output_dir)
        finetuning.init_model(model, opts.init_checkpoint)
        random.Random(opts.seed).shuffle(train_examples)
        arrays = convert_examples_to_features(train_examples, tokenizer, opts.max_seq_length)
        num_train_steps, num_warmup_steps = finetuning.num_train_and_warmup_steps(
            len(train_examples), opts.train_batch_size, opts.num_train_epochs,
            opts.warmup_proportion)
        logging.info("***** Running training *****")
        logging.info("  Num examples = %d", len(train_examples))
        logging.info("  Batch size = %d", opts.train_batch_size)
        logging.info("  Num steps = %d", num_train_steps)
        train_options = opts.finetune_options(num_train_steps, num_warmup_steps)
        result["train"] = finetuning.train_model(model, arrays, swag_loss_fn, train_options,
                                                 strategy=strategy)
        global_step = result["train"]["global_step"]
        write_train_results(opts.output_dir, result["train"])
    else:
        global_step = finetuning.restore_for_prediction(model, opts.output_dir,
                                                        opts.init_checkpoint)

    for prefix, examples, batch_size in (("eval", eval_examples, opts.eval_batch_size),
                                         ("test", predict_examples, opts.predict_batch_size)):
        if examples is None:
            continue
        arrays = convert_examples_to_features(examples, tokenizer, opts.max_seq_length)
        logging.info("***** Running %s *****", prefix)
        logging.info("  Num examples = %d, batch size = %d", len(examples), batch_size)
        logits = finetuning.predict_arrays(model, arrays, batch_size, ["logits"],
                                           length_bucketing=opts.length_bucketing)["logits"]
        write_predictions(os.path.join(opts.output_dir, f"{prefix}_predictions.tsv"), examples,
                          logits)
        if any(e.label is None for e in examples):
            logging.info("%s has no labels; predictions written, not scored",
                         opts.predict_file)
            continue
        scores = evaluate_logits(logits, arrays["labels"])
        # `acc` as the GLUE results (and tools/sweep_learning_rate.py) name accuracy.
        metrics = {"acc": scores["accuracy"], f"{prefix}_loss": scores["loss"],
                   "num_examples": len(examples)}
        if global_step is not None:
            metrics["global_step"] = global_step
        write_eval_results(os.path.join(opts.output_dir, f"{prefix}_results.txt"), metrics)
        logging.info("***** %s results *****", prefix)
        for key in sorted(metrics):
            logging.info("  %s = %s", key, metrics[key])
        result[prefix] = metrics
    return result
