"""One `tools/run_ner.py` invocation: its options, training, evaluation and prediction (see
`bert_tf.tasks.ner`)."""
from __future__ import annotations

import dataclasses
import os
import random
from typing import Sequence

from absl import logging

from bert_tf import io_utils
from bert_tf.errors import UserInputError
from bert_tf.evaluation import conlleval
from bert_tf.options import option
from bert_tf.tasks.feature_based import FEATURE_LAYERS
from bert_tf.tasks.ner.features import convert_sentences_to_features, features_to_arrays
from bert_tf.tasks.ner.reading import (CONLL2003_LABELS, LABEL_LIST_FILE, NerDataError,
                                       NerSentence, check_labels, parse_label_list,
                                       read_conll_file, read_label_list, training_label_list,
                                       write_label_list)
from bert_tf.tasks.ner.scoring import (ner_loss_fn, numpy_token_loss, score_predictions,
                                       word_predictions, write_conlleval_file)
from bert_tf.tasks.results import write_eval_results, write_train_results
from bert_tf.tasks.run_checks import (MODE_FILES, check_common_options, check_modes_and_files,
                                      files_from_data_dir)
from bert_tf.tasks.run_options import EvaluatingRunOptions
from bert_tf.training.precision import (FINETUNING_PRECISION_POLICIES,
                                        runs_under_precision_policy)


# ---------------------------------------------------------------------------------------------
# One run of tools/run_ner.py
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass
class NerRunOptions(EvaluatingRunOptions):
    """Flags of tools/run_ner.py (the original scripts' names where they exist).

    Any CoNLL-format file (token first, tag last; two columns are enough) with any tag set:
    `label_list` (see `reading.training_label_list`) or the training file's tags.
    `data_dir` fills the files not given (`DATA_DIR_FILES`); `tfds_data_dir` instead reads
    the splits of the TFDS dataset `conll2003` prepared there (`TFDS_SPLITS`; the same sentences
    in the same order as the files when `tfds_sources.prepare` made it). `document_context` fills each
    window with the neighbouring sentences of the document (the paper's setting for CoNLL-2003;
    see `convert_sentences_to_features`). `feature_based` trains the paper's feature-based
    tagger (frozen BERT, `feature_layers` combination of its layers, `lstm_layers` BiLSTM layers
    of `lstm_units` per direction) instead of fine-tuning `BertTokenClassifier`.
    """

    _: dataclasses.KW_ONLY
    data_dir: str | None = option(None, "Folder with eng.train, eng.testa, eng.testb "
                                  "(CoNLL-2003).")
    train_file: str | None = option(None, "Training file (CoNLL columns); default "
                                    "data_dir/eng.train.")
    eval_file: str | None = option(None, "Evaluation file; default data_dir/eng.testa.")
    predict_file: str | None = option(None, "Prediction file (tags optional); default "
                                      "data_dir/eng.testb.")
    tfds_data_dir: str | None = option(
        None, "Read the sentences from the tensorflow-datasets dataset conll2003 (splits train, "
        "dev, test) prepared in this folder instead of --data_dir's files (a file flag given "
        "still wins); never downloads (prepare offline: bert_tf.tasks.tfds_sources.prepare).")
    do_lower_case: bool = option(True, "Lower-case the input (True for uncased models; NER "
                                 "usually uses a cased model with False).")
    max_seq_length: int = option(128, "WordPiece tokens per window, [CLS] and [SEP] included; "
                                 "longer sentences are split into windows.")
    doc_stride: int = option(64, "Sub-tokens between the starts of the windows of a long "
                             "sentence.")
    document_context: bool = option(
        False, "Fill each window with the neighbouring sentences of the same -DOCSTART- "
        "document, the sentence in the middle (the paper's \"maximal document context\"); only "
        "the sentence's own words are labelled.")
    feature_based: bool = option(False, "Train a BiLSTM tagger on frozen BERT features instead "
                                 "of fine-tuning BERT (the paper's section 5.3 ablation).")
    feature_layers: str = option(
        "concat_last_four", "Which BERT layers feed the feature-based tagger.",
        choices=FEATURE_LAYERS)
    lstm_units: int = option(768, "Feature-based: units per direction of each BiLSTM.")
    lstm_layers: int = option(2, "Feature-based: number of BiLSTM layers.")
    dropout_rate: float = option(0.1, "Dropout before the tagging layer (and between the BiLSTM "
                                 "layers of the feature-based tagger).")
    label_list: str | None = option(
        None, "Your own tag set: comma-separated tags in id order (O,B-DRUG,I-DRUG), a file of "
        "tags one a line, or `train` (every tag of the training file, sorted). Default: the "
        "training file's tags (the nine CoNLL-2003 tags when it uses only those; a set of your "
        "own sorted); without --do_train, output_dir/label_list.txt.")


DATA_DIR_FILES = {"train_file": "eng.train", "eval_file": "eng.testa", "predict_file": "eng.testb"}
TFDS_SPLITS = {"train_file": "train", "eval_file": "dev", "predict_file": "test"}
"""The TFDS conll2003 split read (with --tfds_data_dir) where a file flag is not given."""


def _check_tfds_options(opts: NerRunOptions) -> None:
    if opts.data_dir:
        raise UserInputError(f"--data_dir={opts.data_dir} and --tfds_data_dir="
                             f"{opts.tfds_data_dir} both given; pass one of them")
    io_utils.check_path(opts.tfds_data_dir, "--tfds_data_dir")
    if not io_utils.isdir(opts.tfds_data_dir):
        raise UserInputError(f"--tfds_data_dir={opts.tfds_data_dir} is not a directory")
    if opts.document_context:
        raise UserInputError("--document_context needs the -DOCSTART- documents of the CoNLL "
                             "files, which TFDS's conll2003 does not keep; use --data_dir (or "
                             "the file flags) with it")
    if not any(getattr(opts, mode) for mode, _ in MODE_FILES):
        check_modes_and_files(opts)  # the "at least one mode" error
    for mode, name in MODE_FILES:  # a file flag given is checked; the others read TFDS splits
        if getattr(opts, mode) and getattr(opts, name):
            check_modes_and_files(opts, [(mode, name)])


def _read_sentences(opts: NerRunOptions, flag: str, require_labels: bool) -> list[NerSentence]:
    """The sentences of `--<flag>`, or (not given, with --tfds_data_dir) of its TFDS split."""
    path = getattr(opts, flag)
    if path or not opts.tfds_data_dir:
        return read_conll_file(path, require_labels=require_labels)
    from bert_tf.tasks.tfds_sources import conll_sentences

    sentences = conll_sentences(TFDS_SPLITS[flag], opts.tfds_data_dir)
    if not sentences:
        raise UserInputError(f"--tfds_data_dir={opts.tfds_data_dir}: conll2003 split "
                             f"{TFDS_SPLITS[flag]} has no sentence")
    return sentences


def validate_options(opts: NerRunOptions, config=None) -> None:
    """Flag checks (UserInputError naming the flag)."""
    if opts.tfds_data_dir:
        _check_tfds_options(opts)
    else:
        check_modes_and_files(opts)
    check_common_options(opts, config, positive=("doc_stride", "lstm_units", "lstm_layers"))
    if opts.feature_based and config is not None:
        if opts.feature_layers not in FEATURE_LAYERS:
            raise UserInputError(f"--feature_layers={opts.feature_layers!r}; expected one of "
                                 f"{', '.join(FEATURE_LAYERS)}")


def _build_model(opts: NerRunOptions, config, num_labels: int):
    if opts.feature_based:
        from bert_tf.tasks.feature_based import FeatureBasedTagger

        return FeatureBasedTagger(config, num_labels, feature_layers=opts.feature_layers,
                                  lstm_units=opts.lstm_units, lstm_layers=opts.lstm_layers,
                                  dropout_rate=opts.dropout_rate)
    from bert_tf.modeling import BertTokenClassifier

    return BertTokenClassifier(config, num_labels, dropout_rate=opts.dropout_rate)


def _predict_and_write(model, sentences: Sequence[NerSentence], tokenizer,
                       label_list: Sequence[str], opts: NerRunOptions, batch_size: int,
                       prefix: str, global_step: int | None) -> dict | None:
    """Predicts `sentences`; writes `<prefix>_predictions.txt` and, with gold tags,
    `<prefix>_results.txt` (key = value) and `<prefix>_conlleval.txt` (conlleval's report)."""
    import numpy as np

    from bert_tf.io_utils import atomic_write_text
    from bert_tf.training.finetuning import predict_arrays

    features = convert_sentences_to_features(sentences, tokenizer, label_list,
                                             opts.max_seq_length, opts.doc_stride,
                                             opts.document_context)
    arrays = features_to_arrays(features)
    logging.info("***** Running %s *****", prefix)
    logging.info("  Num sentences = %d, windows = %d, batch size = %d", len(sentences),
                 len(features), batch_size)
    logits = predict_arrays(model, arrays, batch_size, ["logits"],
                            length_bucketing=opts.length_bucketing)["logits"]
    predicted_ids = np.argmax(logits, axis=-1)
    predictions = word_predictions(features, predicted_ids, sentences, label_list)
    write_conlleval_file(os.path.join(opts.output_dir, f"{prefix}_predictions.txt"), sentences,
                         predictions)
    if any(s.labels is None for s in sentences):
        logging.info("%s has no gold tags; predictions written, not scored", sentences[0].source)
        return None
    result = score_predictions(sentences, predictions)
    atomic_write_text(os.path.join(opts.output_dir, f"{prefix}_conlleval.txt"),
                      conlleval.format_report(result))
    # Unprefixed metric names as the GLUE results (and tools/sweep_learning_rate.py) use them.
    metrics = {"precision": result.precision, "recall": result.recall, "f1": result.f1,
               "token_accuracy": result.accuracy,
               f"{prefix}_loss": numpy_token_loss(logits, arrays["label_ids"]),
               "num_sentences": len(sentences)}
    if global_step is not None:
        metrics["global_step"] = global_step
    write_eval_results(os.path.join(opts.output_dir, f"{prefix}_results.txt"), metrics)
    logging.info("***** %s results *****\n%s", prefix, conlleval.format_report(result))
    for key in sorted(metrics):
        logging.info("  %s = %s", key, metrics[key])
    return metrics


def _label_list_and_training_sentences(opts: NerRunOptions, label_file: str
                                       ) -> tuple[list[NerSentence] | None, list[str]]:
    """The training sentences (with --do_train) and the model's labels: from the training
    file (or --label_list) when training, checked against an existing `label_file` (a run's
    `label_list.txt`; another tag set there is an error: its checkpoints have another head);
    else `label_file`, else --label_list, else the nine CoNLL-2003 tags."""
    flag = parse_label_list(opts.label_list)
    saved = read_label_list(label_file) if io_utils.exists(label_file) else None
    if opts.do_train:
        sentences = _read_sentences(opts, "train_file", require_labels=True)
        labels = training_label_list(sentences, flag)
        if saved is not None and saved != labels:
            raise NerDataError(f"{label_file} holds the tags {', '.join(saved)} of an earlier "
                               f"run, the training file gives {', '.join(labels)}; use another "
                               "--output_dir (or --label_list in that order)")
        return sentences, labels
    if flag == "train":
        raise NerDataError("--label_list=train needs --do_train (the tags come from the "
                           "training file)")
    if saved is not None:
        if flag is not None and list(flag) != saved:
            raise NerDataError(f"--label_list={opts.label_list} differs from {label_file} "
                               f"({', '.join(saved)}), the tags the model was trained with")
        return None, saved
    return None, list(flag) if flag is not None else list(CONLL2003_LABELS)


@runs_under_precision_policy(FINETUNING_PRECISION_POLICIES)
def run_ner(opts: NerRunOptions) -> dict:
    """One run of tools/run_ner.py: optional training, evaluation and prediction.

    Writes into `opts.output_dir`: `label_list.txt`, `model.ckpt-<step>` checkpoints (training);
    `eval_predictions.txt` (conlleval input: `token gold predicted`), `eval_results.txt`
    (`precision`, `recall`, `f1`, `token_accuracy` in %, `eval_loss`, `num_sentences`,
    `global_step`) and `eval_conlleval.txt` (conlleval's report) for --do_eval; the same with
    the `test_` prefix for --do_predict (the results files only when the predict file has tags).

    Evaluation and prediction use the weights just trained; without --do_train, the latest
    checkpoint in `output_dir` if there is one, else --init_checkpoint.

    Returns: {"train": train_model's dict or None, "eval": metrics or None, "test": metrics or
    None, "label_list": [...]}.
    """
    from bert_tf.tokenization import validate_case_matches_checkpoint

    # Flag and data errors come before TensorFlow is imported.
    opts = files_from_data_dir(opts, DATA_DIR_FILES)
    validate_options(opts)
    validate_case_matches_checkpoint(opts.do_lower_case, opts.init_checkpoint)
    label_file = os.path.join(opts.output_dir, LABEL_LIST_FILE)
    train_sentences, label_list = _label_list_and_training_sentences(opts, label_file)
    eval_sentences = predict_sentences = None
    where = (" (the training file's tags)" if opts.do_train else
             f" ({label_file})" if io_utils.exists(label_file) else "")
    if opts.do_eval:
        eval_sentences = _read_sentences(opts, "eval_file", require_labels=True)
        check_labels(eval_sentences, label_list, where)
    if opts.do_predict:
        predict_sentences = _read_sentences(opts, "predict_file", require_labels=False)
        check_labels(predict_sentences, label_list, where)

    import keras

    from bert_tf.modeling import BertConfig
    from bert_tf.pretrained import check_vocab_matches_config, load_tokenizer
    from bert_tf.training import finetuning
    from bert_tf.training.distribution import resolve_strategy

    config = BertConfig.from_json_file(opts.bert_config_file)
    validate_options(opts, config)
    check_vocab_matches_config(opts.vocab_file, config, opts.bert_config_file)
    tokenizer = load_tokenizer(opts.vocab_file, opts.do_lower_case)
    io_utils.makedirs(opts.output_dir)
    keras.utils.set_random_seed(opts.seed)  # fresh weights (the head) and dropout
    strategy = resolve_strategy(opts)
    with strategy.scope():
        model = _build_model(opts, config, len(label_list))
        finetuning.init_model(model, None)  # built under the strategy's scope
    result: dict = {"train": None, "eval": None, "test": None, "label_list": label_list}
    global_step = None

    if opts.do_train:
        if opts.feature_based and not opts.init_checkpoint:
            logging.warning("--feature_based without --init_checkpoint: the tagger is trained on "
                            "the features of a randomly initialised, frozen BERT")
        if finetuning.latest_checkpoint(opts.output_dir):
            logging.info("%s holds a checkpoint: training resumes from it (--init_checkpoint "
                         "only seeds a fresh run)", opts.output_dir)
        finetuning.init_model(model, opts.init_checkpoint)
        write_label_list(label_file, label_list)
        features = convert_sentences_to_features(train_sentences, tokenizer, label_list,
                                                 opts.max_seq_length, opts.doc_stride,
                                                 opts.document_context)
        random.Random(opts.seed).shuffle(features)
        num_train_steps, num_warmup_steps = finetuning.num_train_and_warmup_steps(
            len(train_sentences), opts.train_batch_size, opts.num_train_epochs,
            opts.warmup_proportion)
        logging.info("***** Running training *****")
        logging.info("  Num sentences = %d, windows = %d", len(train_sentences), len(features))
        logging.info("  Batch size = %d", opts.train_batch_size)
        logging.info("  Num steps = %d", num_train_steps)
        arrays = features_to_arrays(features)
        arrays.pop("predict_mask")
        train_options = opts.finetune_options(num_train_steps, num_warmup_steps)
        result["train"] = finetuning.train_model(model, arrays, ner_loss_fn, train_options,
                                                 strategy=strategy)
        global_step = result["train"]["global_step"]
        write_train_results(opts.output_dir, result["train"])
    else:
        global_step = finetuning.restore_for_prediction(model, opts.output_dir,
                                                        opts.init_checkpoint)

    if opts.do_eval:
        result["eval"] = _predict_and_write(model, eval_sentences, tokenizer, label_list, opts,
                                            opts.eval_batch_size, "eval", global_step)
    if opts.do_predict:
        result["test"] = _predict_and_write(model, predict_sentences, tokenizer, label_list,
                                            opts, opts.predict_batch_size, "test", global_step)
    return result
