"""One `tools/run_squad.py` invocation: its options, the loss, fine-tuning, prediction and scoring
(see `bert_tf.tasks.squad`)."""
from __future__ import annotations

import dataclasses
import json
import os
import random
from typing import Any, Callable, Mapping, Sequence

from absl import logging

from bert_tf.errors import UserInputError
from bert_tf.options import option
from bert_tf.tasks.run_checks import check_common_options
from bert_tf.tasks.run_options import FinetuningRunOptions
from bert_tf.tasks.squad.features import (InputFeatures, check_lengths,
                                          convert_examples_to_features, features_to_arrays)
from bert_tf.tasks.squad.reading import (examples_from_squad_data, load_squad_json,
                                         read_squad_examples)
from bert_tf.training.precision import (FINETUNING_PRECISION_POLICIES,
                                        runs_under_precision_policy)


# ---------------------------------------------------------------------------------------------
# Fine-tuning and prediction (one tools/run_squad.py invocation)
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass
class SquadRunOptions(FinetuningRunOptions):
    """The original run_squad.py flags (same names and defaults), plus `seed` (example shuffle,
    input pipeline, initialisation of new weights, dropout), `on_bad_answer` (flag
    `--bad_answers`: "skip" as the original, or "raise"), `keep_checkpoint_max` and the
    distribution flags."""

    _: dataclasses.KW_ONLY
    train_file: str | None = option(None, "SQuAD json for training. E.g., train-v1.1.json")
    predict_file: str | None = option(None, "SQuAD json for predictions. E.g., dev-v1.1.json "
                                      "or test-v1.1.json")
    tfds_data_dir: str | None = option(
        None, "Read SQuAD from a prepared tensorflow-datasets dataset in this folder (squad/v1.1,"
        " or squad/v2.0 with --version_2_with_negative): its train split for --do_train and "
        "validation split for --do_predict where --train_file/--predict_file are not given "
        "(written as SQuAD json into --output_dir); never downloads.")
    max_seq_length: int = option(384, "The maximum total input sequence length after WordPiece "
                                 "tokenization. Sequences longer than this will be truncated, "
                                 "and sequences shorter than this will be padded.")
    doc_stride: int = option(128, "When splitting up a long document into chunks, how much "
                             "stride to take between chunks.")
    max_query_length: int = option(64, "The maximum number of tokens for the question. "
                                   "Questions longer than this will be truncated to this length.")
    n_best_size: int = option(20, "The total number of n-best predictions to generate in the "
                              "nbest_predictions.json output file.")
    max_answer_length: int = option(30, "The maximum length of an answer that can be generated. "
                                    "This is needed because the start and end predictions are "
                                    "not conditioned on one another.")
    verbose_logging: bool = option(False, "If true, all of the warnings related to data "
                                   "processing will be printed.")
    version_2_with_negative: bool = option(False, "If true, the SQuAD examples contain some "
                                           "that do not have an answer.")
    null_score_diff_threshold: float = option(0.0, "If null_score - best_non_null is greater "
                                              "than the threshold predict null.")
    on_bad_answer: str = option(
        "skip", "Training answers whose text does not match their context span: skip them "
        "(logged by question id, as the original) or stop with an error.",
        choices=("skip", "raise"), flag="bad_answers")


def validate_options(opts: SquadRunOptions, config=None) -> None:
    """The original's `validate_flags_or_throw` (UserInputError naming the flag)."""
    if not opts.do_train and not opts.do_predict:
        raise UserInputError("At least one of `do_train` or `do_predict` must be True.")
    if opts.do_train and not opts.train_file:
        raise UserInputError("If `do_train` is True, then `train_file` must be specified.")
    if opts.do_predict and not opts.predict_file:
        raise UserInputError("If `do_predict` is True, then `predict_file` must be specified.")
    check_common_options(opts, config, positive=("n_best_size", "max_answer_length"))
    if opts.on_bad_answer not in ("skip", "raise"):
        raise UserInputError(f"--bad_answers must be 'skip' or 'raise', got "
                             f"{opts.on_bad_answer!r}")
    check_lengths(opts.max_seq_length, opts.max_query_length, opts.doc_stride)


def squad_loss(start_logits, end_logits, start_positions, end_positions):
    """The original's loss: (mean CE of the start position + mean CE of the end position) / 2.

    Args: logits [batch, seq] float; positions [batch] int. Returns a scalar.
    """
    import tensorflow as tf

    def cross_entropy(logits, positions):
        logits = tf.cast(logits, tf.float32)
        one_hot = tf.one_hot(positions, depth=tf.shape(logits)[1], dtype=tf.float32)
        log_probs = tf.nn.log_softmax(logits, axis=-1)
        return -tf.reduce_mean(tf.reduce_sum(one_hot * log_probs, axis=-1))

    return (cross_entropy(start_logits, start_positions)
            + cross_entropy(end_logits, end_positions)) / 2.0


def train_squad(model, train_features: Sequence[InputFeatures], opts: SquadRunOptions,
                num_train_steps: int, num_warmup_steps: int, strategy=None) -> dict:
    """Fine-tunes `model` on the windows with `squad_loss` through the shared loop
    (`bert_tf.training.finetuning.train_model`: AdamWeightDecay with warm-up and linear decay,
    clip 1.0, input repeated, shuffled over 100 windows, last partial batch dropped, original-format
    checkpoints every `save_checkpoints_steps` and at the end, resumed from when `output_dir` holds
    one) under `strategy` (None: the current one; the model must be built in its scope).
    Returns {"global_step", "first_loss", "loss" (of the last step), "checkpoint", ...}."""
    from bert_tf.training.finetuning import train_model

    arrays = features_to_arrays(train_features, is_training=True)
    arrays.pop("unique_ids")
    options = opts.finetune_options(num_train_steps, num_warmup_steps)

    def loss_fn(outputs, batch):
        return squad_loss(outputs["start_logits"], outputs["end_logits"],
                          batch["start_positions"], batch["end_positions"])

    return train_model(model, arrays, loss_fn, options, strategy=strategy)


def predict_logits(model, features: Sequence[InputFeatures], batch_size: int,
                   length_bucketing: bool = True, progress: bool = True,
                   model_inputs: Callable[[dict], dict] | None = None,
                   input_keys: Sequence[str] | None = None) -> list:
    """Runs the model on every feature; returns one `RawResult` per feature, in order.

    `length_bucketing` (as `finetuning.predict_arrays`): every [PAD] position's logits are set
    to -10000. The original's n-best takes the top start/end positions over ALL positions and
    only then drops those outside the context, so in the padded path a [PAD] position with a
    high logit can take one of the n-best slots; cut batches compute [PAD] positions only up to
    their batch's length, so which [PAD] logits exist would depend on the batch composition.
    With every [PAD] at -10000 the answers do not depend on it (they may differ from the
    padded path where a [PAD] took a slot there); `length_bucketing=False` is the original's
    computation exactly. `progress`: a progress bar over the windows. `model_inputs` (with
    its `input_keys`): the model's inputs from the windows' arrays, for a model that reads them
    otherwise than BERT (e.g. `bert_tf.studies.ltr_span_labeler`); the [PAD] positions are
    still the windows' own.
    """
    from bert_tf.tasks.squad.postprocess import RawResult
    from bert_tf.training.finetuning import predict_arrays

    arrays = features_to_arrays(features, is_training=False)
    unique_ids = arrays.pop("unique_ids")
    inputs = arrays if model_inputs is None else model_inputs(arrays)
    keys = {} if input_keys is None else {"input_keys": input_keys}
    out = predict_arrays(model, inputs, batch_size, ("start_logits", "end_logits"),
                         progress=progress, length_bucketing=length_bucketing, **keys)
    if length_bucketing:
        padding = arrays["input_mask"] == 0
        for key in ("start_logits", "end_logits"):
            out[key][padding] = -10000.0
    return [RawResult(unique_id=int(uid), start_logits=start.tolist(), end_logits=end.tolist())
            for uid, start, end in zip(unique_ids, out["start_logits"], out["end_logits"])]


def _has_gold_answers(data: Sequence[Mapping[str, Any]], version_2_with_negative: bool) -> bool:
    """Whether a predict file can be scored: every question carries gold answers (v1.1: at least
    one; v2.0: `answers` present, empty allowed for unanswerable questions)."""
    found = False
    for article in data:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                answers = qa.get("answers")
                if answers is None or (not answers and not version_2_with_negative):
                    return False
                found = True
    return found


def evaluate_predictions(data: Sequence[Mapping[str, Any]], preds,
                         version_2_with_negative: bool,
                         null_score_diff_threshold: float = 0.0) -> dict:
    """Official SQuAD metrics of `compute_predictions` output.

    v1.1: `evaluate_squad_v1` of the predictions. v2.0: `evaluate_squad_v2` of the best non-null
    answers with the null odds as no-answer probabilities and `null_score_diff_threshold` as the
    threshold — `exact`/`f1` are those of `predictions.json`, and the `best_*` keys come from a
    sweep over every threshold (set `--null_score_diff_threshold` to `best_f1_thresh`).
    """
    from bert_tf.evaluation.squad import evaluate_squad_v1, evaluate_squad_v2

    if not version_2_with_negative:
        return dict(evaluate_squad_v1(data, preds.predictions, warn=logging.warning))
    return dict(evaluate_squad_v2(data, preds.best_non_null, na_probs=preds.null_odds,
                                  na_prob_thresh=null_score_diff_threshold,
                                  warn=logging.warning))


@runs_under_precision_policy(FINETUNING_PRECISION_POLICIES)
def run_squad(opts: SquadRunOptions) -> dict:
    """One run of tools/run_squad.py: optional fine-tuning, then optional prediction + scoring.

    Writes into `opts.output_dir`: `model.ckpt-<step>` checkpoints (training), then
    `predictions.json`, `nbest_predictions.json`, `null_odds.json` (v2.0) and, when the predict
    file carries answers, `eval_results.json`.

    Prediction uses the weights just trained; without `--do_train`, the latest checkpoint in
    `output_dir` if there is one (as the original's Estimator), else `--init_checkpoint`.

    Returns: {"train": {...} or None, "predictions": SquadPredictions or None,
              "eval": metrics dict or None}.
    """
    from bert_tf.io_utils import atomic_write_text
    from bert_tf.tokenization import validate_case_matches_checkpoint

    if getattr(opts, "tfds_data_dir", None):
        from bert_tf.tasks.tfds_sources import squad_files_from_tfds

        opts = squad_files_from_tfds(opts)
    # Flag and data errors are reported before TensorFlow is imported.
    validate_options(opts)
    validate_case_matches_checkpoint(opts.do_lower_case, opts.init_checkpoint)
    train_examples = None
    if opts.do_train:
        train_examples = read_squad_examples(opts.train_file, is_training=True,
                                             version_2_with_negative=opts.version_2_with_negative,
                                             on_bad_answer=opts.on_bad_answer)
        random.Random(opts.seed).shuffle(train_examples)
        num_train_steps = int(len(train_examples) / opts.train_batch_size
                              * opts.num_train_epochs)
        num_warmup_steps = int(num_train_steps * opts.warmup_proportion)
        if num_train_steps <= 0:
            raise UserInputError(
                f"{len(train_examples)} training questions / --train_batch_size="
                f"{opts.train_batch_size} * --num_train_epochs={opts.num_train_epochs} gives "
                f"{num_train_steps} training steps; use more data, more epochs or a smaller "
                "batch")
    predict_data = None
    if opts.do_predict:
        predict_data = load_squad_json(opts.predict_file)
        eval_examples = examples_from_squad_data(predict_data, is_training=False,
                                                 source=os.fspath(opts.predict_file))

    from bert_tf.modeling import BertConfig, BertSpanLabeler
    from bert_tf.pretrained import load_bert
    from bert_tf.tasks.squad import postprocess
    from bert_tf.training.finetuning import init_model, latest_checkpoint, restore_for_prediction

    validate_options(opts, BertConfig.from_json_file(opts.bert_config_file))
    from bert_tf import io_utils

    from bert_tf.training.distribution import resolve_strategy

    if getattr(opts, "use_tpu", False) or getattr(opts, "distribution_strategy", None) == "tpu":
        # TPU workers write the output themselves (gs:// only, as the original)
        io_utils.require_cloud_storage(opts.output_dir, "--output_dir")
    # The strategy (a TPU is resolved) before anything is written, as the original's RunConfig.
    strategy = resolve_strategy(opts)
    io_utils.makedirs(opts.output_dir)
    import keras

    keras.utils.set_random_seed(opts.seed)  # fresh weights (the squad head) and dropout
    with strategy.scope():
        _, tokenizer, model = load_bert(opts.bert_config_file, opts.vocab_file, None,
                                        opts.do_lower_case, model_factory=BertSpanLabeler)
        init_model(model, opts.init_checkpoint)  # TF1 checkpoint or encoder SavedModel
    result: dict = {"train": None, "predictions": None, "eval": None}

    if opts.do_train:
        if latest_checkpoint(opts.output_dir):
            logging.info("%s holds a checkpoint: training resumes from it (--init_checkpoint "
                         "only seeds a fresh run)", opts.output_dir)
        train_features = convert_examples_to_features(
            train_examples, tokenizer, opts.max_seq_length, opts.doc_stride,
            opts.max_query_length, is_training=True)
        if len(train_features) < opts.train_batch_size:
            logging.warning("only %d training windows for a batch of %d: each batch repeats "
                            "windows", len(train_features), opts.train_batch_size)
        logging.info("***** Running training *****")
        logging.info("  Num orig examples = %d", len(train_examples))
        logging.info("  Num split examples = %d", len(train_features))
        logging.info("  Batch size = %d", opts.train_batch_size)
        logging.info("  Num steps = %d", num_train_steps)
        result["train"] = train_squad(model, train_features, opts, num_train_steps,
                                      num_warmup_steps, strategy=strategy)
    elif opts.do_predict:
        restore_for_prediction(model, opts.output_dir, opts.init_checkpoint)

    if opts.do_predict:
        eval_features = convert_examples_to_features(
            eval_examples, tokenizer, opts.max_seq_length, opts.doc_stride,
            opts.max_query_length, is_training=False)
        logging.info("***** Running predictions *****")
        logging.info("  Num orig examples = %d", len(eval_examples))
        logging.info("  Num split examples = %d", len(eval_features))
        logging.info("  Batch size = %d", opts.predict_batch_size)
        raw_results = predict_logits(model, eval_features, opts.predict_batch_size,
                                     opts.length_bucketing)
        null_odds_file = (os.path.join(opts.output_dir, "null_odds.json")
                          if opts.version_2_with_negative else None)
        preds = postprocess.write_predictions(
            eval_examples, eval_features, raw_results, opts.n_best_size, opts.max_answer_length,
            opts.do_lower_case, os.path.join(opts.output_dir, "predictions.json"),
            os.path.join(opts.output_dir, "nbest_predictions.json"), null_odds_file,
            version_2_with_negative=opts.version_2_with_negative,
            null_score_diff_threshold=opts.null_score_diff_threshold,
            verbose_logging=opts.verbose_logging)
        result["predictions"] = preds
        if _has_gold_answers(predict_data, opts.version_2_with_negative):
            metrics = evaluate_predictions(predict_data, preds, opts.version_2_with_negative,
                                           opts.null_score_diff_threshold)
            atomic_write_text(os.path.join(opts.output_dir, "eval_results.json"),
                              json.dumps(metrics, indent=2) + "\n")
            logging.info("***** Eval results *****")
            for key, value in metrics.items():
                logging.info("  %s = %s", key, value)
            if opts.version_2_with_negative and "best_f1_thresh" in metrics:
                logging.info("best_f1_thresh = %s: pass --null_score_diff_threshold=%s to "
                             "predict with the threshold that maximises F1 on this file",
                             metrics["best_f1_thresh"], metrics["best_f1_thresh"])
            result["eval"] = metrics
        else:
            logging.info("%s has no gold answers for every question; not scored",
                         opts.predict_file)
    return result
