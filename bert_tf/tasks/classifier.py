"""Sentence(-pair) classification and regression fine-tuning: one `tools/run_classifier.py` run.

The original `run_classifier.py` as a library function: read a task's files
(`bert_tf.tasks.glue`), pack features, fine-tune `BertClassifier` with the shared loop
(`bert_tf.training.finetuning`), evaluate on the dev set(s) with the task's official GLUE metric
(`bert_tf.evaluation.glue_metrics`) and write test predictions in the original format and as GLUE
submission files.

Outputs in `output_dir`:
  * `model.ckpt-<step>` + `checkpoint` (original TF1 names; `output_weights`/`output_bias` head).
  * `eval_results.txt`: "key = value" lines, sorted, as the original: the task's metrics, e.g.
    `acc`, `f1`, `acc_and_f1` (MRPC) or `mcc` (CoLA) or `pearson`, `spearmanr`, `corr` (STS-B),
    plus `eval_loss` and `global_step`. MNLI: matched in `eval_results.txt`, mismatched in
    `eval_results_mismatched.txt`.
  * `test_results.tsv`: one line per test example, the class probabilities tab-separated (the
    original's file; STS-B: the predicted score). MNLI mismatched: `test_results_mismatched.tsv`.
  * `<TASK>.tsv` (`CoLA.tsv`, `MNLI-m.tsv`, `MNLI-mm.tsv`, `STS-B.tsv`, ...): the GLUE leaderboard
    file, header `index\\tprediction`, one row per test example with its label name (score for
    STS-B). With MNLI, `AX.tsv` too when the GLUE diagnostic file is found (see
    `ClassifierRunOptions.diagnostic_file`).

Your own data: `--task_name=csv|tsv|jsonl` reads your files with the columns named by flags
(`bert_tf.tasks.own_data`); the label set comes from the training file and is written to
`labels.json`.

Where this differs from the original (documented in docs/classifier.md): training examples are
shuffled once with `seed` before the (100-example-buffer) input shuffle, so that files sorted by
label (IMDb) train properly; STS-B (regression, mean squared error), SST-2, QQP, QNLI, RTE, WNLI
and IMDb are added; MNLI also evaluates the mismatched set.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import random
from typing import Sequence

from absl import logging

from bert_tf.errors import UserInputError
from bert_tf.options import option
from bert_tf import io_utils
from bert_tf.tasks import glue, own_data
from bert_tf.tasks.results import format_eval_results, softmax, write_eval_results
from bert_tf.tasks.run_checks import check_common_options
from bert_tf.tasks.run_options import EvaluatingRunOptions
from bert_tf.training.precision import (FINETUNING_PRECISION_POLICIES,
                                        runs_under_precision_policy)


@dataclasses.dataclass
class ClassifierRunOptions(EvaluatingRunOptions, own_data.OwnDataOptions):
    """The original run_classifier.py flags (same names and defaults), plus `seed` (example and
    input shuffle, new weights, dropout), `dev_file` (evaluate on this file, in the task's
    train/dev layout, instead of the task's dev set), `xnli_language`, `diagnostic_file` (GLUE
    AX, predicted with an MNLI model), `keep_checkpoint_max` and the distribution flags."""

    # Not required flags here: --bert_hub_module_handle carries the config and vocab instead.
    bert_config_file: str | None = option(
        None, "The config json file corresponding to the pre-trained BERT model. This specifies "
        "the model architecture. Not needed with --bert_hub_module_handle.")
    vocab_file: str | None = option(None, "The vocabulary file that the BERT model was trained "
                                    "on. Not needed with --bert_hub_module_handle.")
    _: dataclasses.KW_ONLY
    task_name: str = option(help="The name of the task to train: cola, sst-2, mrpc, sts-b, qqp, "
                            "mnli, qnli, rte, wnli, xnli or imdb (case-insensitive); or csv, "
                            "tsv, jsonl: your own files (--train_file, --text_a_column, "
                            "--label_column, ...; see docs/classifier.md).")
    data_dir: str | None = option(None, "The input data dir. Should contain the .tsv files (or "
                                  "other data files) for the task. Not needed with "
                                  "--tfds_data_dir.")
    dev_file: str | None = option(None, "Evaluate on this tsv (the task's train/dev layout) "
                                  "instead of the task's dev set (IMDb: instead of the held-out "
                                  "10%).")
    xnli_language: str = option("zh", "XNLI: the language trained and evaluated.")
    diagnostic_file: str | None = option(
        None, "MNLI --do_predict: the GLUE diagnostic tsv for AX.tsv (default: diagnostic.tsv in "
        "--data_dir or ../diagnostic/).")
    tfds_data_dir: str | None = option(
        None, "Read the task from a prepared tensorflow-datasets dataset (glue/<task>, "
        "imdb_reviews) in this folder instead of --data_dir's tsv files; never downloads "
        "(prepare offline: bert_tf.tasks.tfds_sources.prepare).")
    bert_hub_module_handle: str | None = option(
        None, "The original run_classifier_with_tfhub.py's flag: a bert_tf encoder SavedModel "
        "folder (exported with its vocab) or a TF Hub handle; the encoder, its config, vocab "
        "and casing come from the module (instead of --bert_config_file, --vocab_file, "
        "--do_lower_case, --init_checkpoint).")


def use_hub_module(opts: ClassifierRunOptions) -> ClassifierRunOptions:
    """--bert_hub_module_handle: the options with the module's encoder as --init_checkpoint and
    its vocab and casing (as run_classifier_with_tfhub.py); its config is written to
    `output_dir/bert_config.json` (an existing different file there is an error)."""
    from bert_tf.hub_module import resolve_hub_module

    if opts.init_checkpoint:
        raise UserInputError("--bert_hub_module_handle and --init_checkpoint both given; the "
                             "module is the starting point, pass only one of them")
    module = resolve_hub_module(opts.bert_hub_module_handle)
    ignored = [f"--{n}" for n in ("bert_config_file", "vocab_file") if getattr(opts, n)]
    if ignored:
        logging.warning("%s ignored: --bert_hub_module_handle carries the config and vocab (as "
                        "run_classifier_with_tfhub.py)", " and ".join(ignored))
    config_file = os.path.join(opts.output_dir, "bert_config.json")
    text = module.config.to_json_string()
    if io_utils.exists(config_file):
        if io_utils.read_text(config_file) != text:
            raise UserInputError(f"{config_file} exists and is not the config of "
                                 f"--bert_hub_module_handle={opts.bert_hub_module_handle}; "
                                 "use another --output_dir")
    else:
        io_utils.atomic_write_text(config_file, text)
    return dataclasses.replace(opts, bert_config_file=config_file, vocab_file=module.vocab_file,
                               do_lower_case=module.do_lower_case, init_checkpoint=module.path)


def _wants_tpu(opts) -> bool:
    return bool(getattr(opts, "use_tpu", False)) or getattr(
        opts, "distribution_strategy", None) == "tpu"


def validate_options(opts: ClassifierRunOptions, config=None) -> None:
    """Flag checks of the original (UserInputError naming the flag)."""
    if not (opts.do_train or opts.do_eval or opts.do_predict):
        raise UserInputError("At least one of `do_train`, `do_eval` or `do_predict' must be True.")
    own = own_data.is_own_data_task(opts.task_name)
    if not own:
        glue.canonical_task_name(opts.task_name)
        own_data.check_unused_flags(opts)
    elif getattr(opts, "tfds_data_dir", None):
        raise UserInputError(f"--tfds_data_dir does not apply to --task_name={opts.task_name} "
                             "(your own files: --train_file/--dev_file/--test_file or --data_dir)")
    check_common_options(opts, config)
    if opts.do_train and not opts.learning_rate > 0:
        raise UserInputError(f"--learning_rate must be positive, got {opts.learning_rate}")
    for name in ("data_dir", "bert_config_file", "vocab_file", "output_dir", "init_checkpoint",
                 "dev_file", "diagnostic_file", "train_file", "test_file"):
        io_utils.check_path(getattr(opts, name, None), f"--{name}")
    if _wants_tpu(opts):  # TPU workers write the output themselves: gs:// only (as the original)
        io_utils.require_cloud_storage(opts.output_dir, "--output_dir")
    io_utils.check_path(getattr(opts, "tfds_data_dir", None), "--tfds_data_dir")
    if getattr(opts, "tfds_data_dir", None):
        if not io_utils.isdir(opts.tfds_data_dir):
            raise UserInputError(f"--tfds_data_dir={opts.tfds_data_dir} is not a directory")
    elif not opts.data_dir and not own:
        raise UserInputError("--data_dir (the task's data folder) or --tfds_data_dir is required")
    elif opts.data_dir and not io_utils.isdir(opts.data_dir):
        raise UserInputError(f"--data_dir={opts.data_dir} is not a directory")
    if not opts.bert_config_file or not opts.vocab_file:
        raise UserInputError(
            "no model: give --bert_config_file and --vocab_file (the pretrained model's files), "
            "or --bert_hub_module_handle (a module carrying both); missing: --"
            + (" and --".join(n for n in ("bert_config_file", "vocab_file") if not getattr(opts, n))))
    for name in ("bert_config_file", "vocab_file"):
        if not io_utils.exists(getattr(opts, name)):
            raise UserInputError(f"--{name}={getattr(opts, name)} does not exist")


# ---------------------------------------------------------------------------------------------
# Losses and outputs
# ---------------------------------------------------------------------------------------------
def classification_loss(logits, label_ids):
    """The original's loss: mean over the batch of −log softmax(logits)[label].

    Args: logits [batch, num_labels] float; label_ids [batch] int. Returns a scalar.
    """
    import tensorflow as tf

    logits = tf.cast(logits, tf.float32)
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    one_hot = tf.one_hot(tf.cast(label_ids, tf.int32), depth=tf.shape(logits)[-1])
    return tf.reduce_mean(-tf.reduce_sum(one_hot * log_probs, axis=-1))


def regression_loss(logits, labels):
    """Mean squared error of the single output: logits [batch, 1], labels [batch] float."""
    import tensorflow as tf

    predictions = tf.cast(logits, tf.float32)[:, 0]
    return tf.reduce_mean(tf.square(predictions - tf.cast(labels, tf.float32)))


def per_example_losses(logits, label_ids, regression: bool):
    """NumPy per-example losses (the same formulas as the training losses), for `eval_loss`."""
    import numpy as np

    logits = logits.astype(np.float64)
    if regression:
        return np.square(logits[:, 0] - label_ids)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return -log_probs[np.arange(len(label_ids)), label_ids.astype(np.int64)]


def original_eval_metrics(per_example_loss, eval_batch_size: int, correct=None) -> dict:
    """The keys the original's Estimator writes to eval_results.txt (besides `global_step`).

    Args:
      per_example_loss: float [N], in prediction order.
      eval_batch_size: the batches the Estimator evaluated (the last one may be partial).
      correct: bool [N] for classification tasks (None for regression, which has no accuracy).

    Returns:
      {"eval_loss": mean over the examples, "loss": mean over the batches of each batch's mean
       (the Estimator's average of the model's loss), "eval_accuracy" (classification only)}.
    """
    import numpy as np

    losses = np.asarray(per_example_loss, np.float64)
    batches = [losses[i:i + eval_batch_size].mean()
               for i in range(0, len(losses), eval_batch_size)]
    metrics = {"eval_loss": float(losses.mean()), "loss": float(np.mean(batches))}
    if correct is not None:
        metrics["eval_accuracy"] = float(np.mean(correct))
    return metrics


def _suffix(split_name: str) -> str:
    """File-name suffix of a split: "" for the main dev/test set, "_mismatched" (MNLI),
    "_diagnostic" (GLUE AX)."""
    if split_name.endswith("mismatched"):
        return "_mismatched"
    return "_diagnostic" if split_name == "diagnostic" else ""


def write_test_outputs(output_dir: str, processor: glue.DataProcessor, split: glue.EvalSplit,
                       logits, leaderboard_name: str | None) -> dict[str, str]:
    """Writes test_results[_mismatched].tsv (original format: each probability as `str` of a
    float32, tab-separated; STS-B: the score) and the GLUE leaderboard file.

    Args:
      logits: [N, num_labels] model outputs for `split.examples`, in order.
    Returns: {"test_results": path, "leaderboard": path or None}.
    """
    import numpy as np

    from bert_tf.io_utils import atomic_write_text

    examples = split.examples
    # Numbers as the original prints them: `str()` of a float32 (the shortest decimal that reads
    # back as the same float32, e.g. 0.38892138), not of a float64.
    if processor.is_regression:
        scores = np.asarray(logits)[:, 0].astype(np.float32)
        lines = [str(s) + "\n" for s in scores]
        predictions = [f"{float(s):.6f}" for s in scores]
    else:
        probabilities = softmax(logits)  # float64: the argmax of the exact probabilities
        lines = ["\t".join(str(p) for p in row.astype(np.float32)) + "\n"
                 for row in probabilities]
        predictions = [processor.labels[i] for i in probabilities.argmax(axis=-1)]
    paths = {"test_results": os.path.join(output_dir, f"test_results{_suffix(split.name)}.tsv"),
             "leaderboard": None}
    atomic_write_text(paths["test_results"], "".join(lines))
    if leaderboard_name:
        rows = ["index\tprediction\n"] + [f"{e.index}\t{p}\n"
                                          for e, p in zip(examples, predictions)]
        paths["leaderboard"] = os.path.join(output_dir, f"{leaderboard_name}.tsv")
        atomic_write_text(paths["leaderboard"], "".join(rows))
    logging.info("Wrote %d predictions to %s%s", len(examples), paths["test_results"],
                 f" and {paths['leaderboard']}" if paths["leaderboard"] else "")
    return paths


def find_diagnostic_file(data_dir: str, explicit: str | None) -> str | None:
    """The GLUE diagnostic (AX) file: `explicit`, else `data_dir/diagnostic.tsv`, else
    `data_dir/../diagnostic/diagnostic.tsv` (the GLUE download's layout), else None."""
    if explicit:
        if not io_utils.exists(explicit):
            raise UserInputError(f"--diagnostic_file={explicit} does not exist")
        return explicit
    for candidate in (os.path.join(data_dir, "diagnostic.tsv"),
                      os.path.join(data_dir, os.pardir, "diagnostic", "diagnostic.tsv")):
        if io_utils.exists(candidate):
            return candidate if io_utils.is_remote(candidate) else os.path.normpath(candidate)
    return None


def read_diagnostic(path: str) -> glue.EvalSplit:
    """GLUE AX: `index sentence1 sentence2` (header), predicted with an MNLI model."""
    processor = glue.MnliProcessor()
    examples = processor.read_examples(path, "test", glue._Layout(text_a=1, text_b=2, index=0))
    return glue.EvalSplit("diagnostic", examples, "AX")


# ---------------------------------------------------------------------------------------------
# One run
# ---------------------------------------------------------------------------------------------
@runs_under_precision_policy(FINETUNING_PRECISION_POLICIES)
def run_classifier(opts: ClassifierRunOptions) -> dict:
    """One run of tools/run_classifier.py: optional fine-tuning, evaluation, prediction.

    Evaluation and prediction use the weights just trained; without `do_train`, the latest
    checkpoint in `output_dir` if there is one (as the original's Estimator), else
    `init_checkpoint`.

    Returns:
      {"task": canonical name, "train": train_model's result or None,
       "eval": {split name: metrics incl. eval_loss and global_step} or None,
       "predict": {split name: written paths} or None, "metric_key": the dev score the paper
       reports for the task, e.g. "acc", "f1", "mcc", "spearmanr"}.

    Raises:
      ValueError (flags), GlueDataError (files, naming file and line), CheckpointError
      (checkpoint of another model size, naming the variable), FloatingPointError (NaN loss).
    """
    from bert_tf.tokenization import validate_case_matches_checkpoint

    if getattr(opts, "bert_hub_module_handle", None):
        opts = use_hub_module(opts)
    # Flag and data errors are reported before TensorFlow is imported.
    validate_options(opts)
    validate_case_matches_checkpoint(opts.do_lower_case, opts.init_checkpoint)
    own = own_data.is_own_data_task(opts.task_name)
    if own:  # your own csv/tsv/jsonl files: the label set comes from the training file
        task = opts.task_name.strip().lower()
        processor = own_data.processor_from_options(opts)
    else:
        task = glue.canonical_task_name(opts.task_name)
        processor = glue.get_processor(task, opts.xnli_language)
    source = processor  # where the examples come from: the tsv files, or a TFDS dataset
    if getattr(opts, "tfds_data_dir", None) and not own:
        from bert_tf.tasks.tfds_sources import TfdsTaskSource

        source = TfdsTaskSource(task, opts.tfds_data_dir)
    train_examples = None
    if opts.do_train:
        train_examples = source.get_train_examples(opts.data_dir, opts.dev_file)
        random.Random(opts.seed).shuffle(train_examples)
    if own:
        own_data.resolve_labels(processor, opts.output_dir, training=opts.do_train)
    label_list = processor.get_labels()
    dev_splits = source.get_dev_splits(opts.data_dir, opts.dev_file) if opts.do_eval else []
    test_splits: list[glue.EvalSplit] = []
    if opts.do_predict:
        test_splits = source.get_test_splits(opts.data_dir)
        if task == "mnli" and opts.data_dir:
            diagnostic = find_diagnostic_file(opts.data_dir, opts.diagnostic_file)
            if diagnostic:
                test_splits.append(read_diagnostic(diagnostic))

    import keras

    from bert_tf.evaluation.glue_metrics import glue_metrics
    from bert_tf.modeling import BertClassifier, BertConfig
    from bert_tf.pretrained import load_bert
    from bert_tf.training.finetuning import (init_model, latest_checkpoint,
                                             num_train_and_warmup_steps, predict_arrays,
                                             restore_for_prediction, train_model)
    from bert_tf.training.distribution import resolve_strategy

    validate_options(opts, BertConfig.from_json_file(opts.bert_config_file))
    if opts.do_train:
        num_train_steps, num_warmup_steps = num_train_and_warmup_steps(
            len(train_examples), opts.train_batch_size, opts.num_train_epochs,
            opts.warmup_proportion)
    # The strategy (a TPU is resolved) before anything is written, as the original's RunConfig.
    strategy = resolve_strategy(opts)
    io_utils.makedirs(opts.output_dir)
    if own and opts.do_train:
        own_data.write_labels(processor, opts.output_dir)
    keras.utils.set_random_seed(opts.seed)  # the new classifier weights and dropout
    regression = processor.is_regression
    with strategy.scope():
        _, tokenizer, model = load_bert(
            opts.bert_config_file, opts.vocab_file, None, opts.do_lower_case,
            model_factory=lambda c: BertClassifier(c, num_labels=processor.num_labels))
        init_model(model, opts.init_checkpoint)
    result: dict = {"task": task, "train": None, "eval": None, "predict": None,
                    "metric_key": processor.metric_key}
    metrics_task = getattr(processor, "metrics_task", task)  # own data: sst-2's or sts-b's

    if opts.do_train:
        if latest_checkpoint(opts.output_dir):
            logging.info("%s holds a checkpoint: training resumes from it (--init_checkpoint "
                         "only seeds a fresh run)", opts.output_dir)
        features = glue.convert_examples_to_features(train_examples, label_list,
                                                     opts.max_seq_length, tokenizer, "train")
        arrays = glue.features_to_arrays(features, regression)
        logging.info("***** Running training *****")
        logging.info("  Num examples = %d", len(train_examples))
        logging.info("  Batch size = %d", opts.train_batch_size)
        logging.info("  Num steps = %d", num_train_steps)
        options = opts.finetune_options(num_train_steps, num_warmup_steps)
        loss = regression_loss if regression else classification_loss

        def loss_fn(outputs, batch):
            return loss(outputs["logits"], batch["label_ids"])

        result["train"] = train_model(model, arrays, loss_fn, options, strategy=strategy)
        global_step = result["train"]["global_step"]
    else:
        global_step = restore_for_prediction(model, opts.output_dir, opts.init_checkpoint) or 0

    if opts.do_eval:
        result["eval"] = {}
        for split in dev_splits:
            features = glue.convert_examples_to_features(split.examples, label_list,
                                                         opts.max_seq_length, tokenizer,
                                                         split.name)
            arrays = glue.features_to_arrays(features, regression)
            logging.info("***** Running evaluation: %s *****", split.name)
            logging.info("  Num examples = %d", len(features))
            logging.info("  Batch size = %d", opts.eval_batch_size)
            logits = predict_arrays(model, arrays, opts.eval_batch_size, ["logits"],
                                    length_bucketing=opts.length_bucketing)["logits"]
            labels = arrays["label_ids"]
            predictions = logits[:, 0] if regression else logits.argmax(axis=-1)
            metrics = {k: float(v)
                       for k, v in glue_metrics(metrics_task, predictions, labels).items()}
            metrics.update(original_eval_metrics(
                per_example_losses(logits, labels, regression), opts.eval_batch_size,
                None if regression else predictions == labels))
            metrics["global_step"] = int(global_step)
            path = os.path.join(opts.output_dir, f"eval_results{_suffix(split.name)}.txt")
            write_eval_results(path, metrics)
            logging.info("***** Eval results: %s *****", split.name)
            for key in sorted(metrics):
                logging.info("  %s = %s", key, metrics[key])
            if any(isinstance(v, float) and math.isnan(v) for v in metrics.values()):
                logging.warning("%s: some metric is nan (a constant prediction has no defined "
                                "correlation)", split.name)
            result["eval"][split.name] = metrics

    if opts.do_predict:
        result["predict"] = {}
        for split in test_splits:
            features = glue.convert_examples_to_features(split.examples, label_list,
                                                         opts.max_seq_length, tokenizer,
                                                         split.name)
            arrays = glue.features_to_arrays(features, regression)
            logging.info("***** Running prediction: %s *****", split.name)
            logging.info("  Num examples = %d", len(features))
            logging.info("  Batch size = %d", opts.predict_batch_size)
            logits = predict_arrays(model, arrays, opts.predict_batch_size, ["logits"],
                                    length_bucketing=opts.length_bucketing)["logits"]
            result["predict"][split.name] = write_test_outputs(
                opts.output_dir, processor, split, logits, split.leaderboard_name)
    return result


def primary_score(result: dict) -> float | None:
    """The dev score of a run (first dev split, the task's `metric_key`), or None."""
    evals = result.get("eval") or {}
    if not evals:
        return None
    first = next(iter(evals.values()))
    return first.get(result["metric_key"])


def summarize(result: dict) -> str:
    """A JSON line for logs: task, steps, losses and dev metrics."""
    train = result.get("train") or {}
    return json.dumps({"task": result["task"], "global_step": train.get("global_step"),
                       "first_loss": train.get("first_loss"), "loss": train.get("loss"),
                       "eval": result.get("eval")}, sort_keys=True)


__all__: Sequence[str] = ["ClassifierRunOptions", "run_classifier", "validate_options",
                          "classification_loss", "regression_loss", "format_eval_results",
                          "write_test_outputs", "primary_score"]
