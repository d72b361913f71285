"""Faithful mode: the original `create_pretraining_data.py`, example for example.

For the same input files, vocab, flags and seed it writes the same tf.train.Examples in the same
order (round-robin over the output files) and logs the first 20 instances as the original does.
It differs only in how it gets there: instances are kept as serialized bytes (not objects),
tokens as ids, the CRCs are computed without TensorFlow, and bad input stops with an error that
names the file and line (see docs/pretraining_data.md).
"""
from __future__ import annotations

import random
import time
from typing import Mapping, Sequence

from absl import logging

from bert_tf.pretraining_data.text_reader import IdTokenizer, ReadStats, expand_input_patterns, \
    read_documents
from bert_tf.pretraining_data.instances import InstanceStats, create_training_instances
from bert_tf.pretraining_data.masking import VocabInfo
from bert_tf.pretraining_data.options import PretrainingDataError, PretrainingDataOptions
from bert_tf.pretraining_data.writer import FEATURE_NAMES, ExampleEncoder, RoundRobinWriter, \
    check_output_file, parse_example, remove_stale_temporaries


def load_tokenizer(vocab_file: str, do_lower_case: bool):
    """`FullTokenizer(vocab_file, do_lower_case)`; a bad vocab raises PretrainingDataError naming
    `--vocab_file`."""
    from bert_tf.tokenization import FullTokenizer

    try:
        return FullTokenizer(vocab_file, do_lower_case)
    except (OSError, ValueError) as e:
        raise PretrainingDataError(f"--vocab_file={vocab_file}: {e}") from None


def split_output_files(output_files: str | Sequence[str]) -> list[str]:
    """Comma-separated string or list -> list of paths (flag `--output_file`)."""
    if isinstance(output_files, str):
        output_files = output_files.split(",")
    paths = [p.strip() for p in output_files if p.strip()]
    if not paths:
        raise PretrainingDataError("--output_file is empty: give one or more output paths")
    if len(set(paths)) != len(paths):
        raise PretrainingDataError(f"--output_file names a file twice: {','.join(paths)}")
    return paths


def log_example(record: bytes, inv_vocab: Mapping[int, str]) -> None:
    """Logs one serialized example the way the original logs its first 20 instances."""
    features = parse_example(record)
    n = sum(features["input_mask"])
    tokens = [inv_vocab[i] for i in features["input_ids"][:n]]
    logging.info("*** Example ***")
    logging.info("tokens: %s", " ".join(tokens))
    for name in FEATURE_NAMES:
        logging.info("%s: %s", name, " ".join(str(x) for x in features[name]))


def warn_about_documents(documents: Sequence, locations: Sequence,
                         options: PretrainingDataOptions) -> None:
    """Logs warnings for one-sentence documents and a one-document corpus (both legal)."""
    if not options.next_sentence_prediction:
        return
    singles = [loc for doc, loc in zip(documents, locations) if len(doc) == 1]
    if singles:
        where = ", ".join(f"{p}:{n}" for p, n in singles[:5])
        logging.warning(
            "%d document(s) have a single sentence (first at %s): each of their instances is "
            "random-next (NotNext) with B from another document, as in the original", len(singles),
            where)
    if len(documents) == 1:
        logging.warning("the corpus has only one document: random-next segments come from that "
                        "same document (as in the original)")


def create_pretraining_data(input_files: str | Sequence[str], output_files: str | Sequence[str],
                            tokenizer, options: PretrainingDataOptions | None = None, *,
                            rng: random.Random | None = None, skip_invalid_lines: bool = False,
                            allow_prediction_cap: bool = False, log_examples: int = 20,
                            vocab_file: str = "<vocab>", progress: bool = False) -> dict:
    """Runs the original pipeline: read + tokenize all documents, make all instances, shuffle,
    write round-robin.

    Args:
      input_files: comma-separated paths/globs or a list (`--input_file`); `.gz` allowed.
      output_files: comma-separated paths or a list (`--output_file`); instance i goes to file
        i mod len(output_files).
      tokenizer: a `FullTokenizer` (`.tokenize`, `.vocab`, `.inv_vocab`).
      options: PretrainingDataOptions (defaults = the original's flag defaults).
      rng: generator to use instead of `random.Random(options.random_seed)` (e.g. a
        `TracingRandom(seed)`).
      skip_invalid_lines: skip (and count) non-UTF-8 lines instead of stopping.
      allow_prediction_cap: see PretrainingDataOptions.validate.
      log_examples: how many of the first instances to log (20 in the original).
      vocab_file: named in error messages.
      progress: tqdm bars (count, rate, ETA) on stderr while instances are made and written;
        the output is the same either way.

    Returns:
      summary dict: documents, instances, tokens, masked positions, truncations, IsNext/NotNext
      shares, invalid lines, output files, seconds.

    Raises:
      PretrainingDataError: bad flags, vocab or input (nothing is left under an output name).
    """
    start = time.time()
    options = options or PretrainingDataOptions()
    options.validate(allow_prediction_cap)
    vocab = VocabInfo.from_vocab(tokenizer.vocab, vocab_file)
    files = expand_input_patterns(input_files)
    outputs = split_output_files(output_files)
    for path in outputs:  # before the work: a bad output path must not cost the whole run
        check_output_file(path)
        removed = remove_stale_temporaries(path)
        if removed:
            logging.info("Removed temporary file(s) of an earlier interrupted run: %s",
                         ", ".join(removed))
    if rng is None:
        rng = random.Random(options.random_seed)

    logging.info("*** Reading from input files ***")
    for path in files:
        logging.info("  %s", path)
    read_stats = ReadStats()
    documents, locations = read_documents(files, IdTokenizer(tokenizer), read_stats,
                                          skip_invalid_lines)
    if not documents:
        raise PretrainingDataError(
            f"--input_file: no text in {', '.join(files)} (every line is blank or tokenizes "
            "to nothing)")
    if read_stats.invalid_lines:
        logging.warning("skipped %d line(s) that are not valid UTF-8 (first: %s)",
                        read_stats.invalid_lines, ", ".join(read_stats.invalid_line_examples))
    warn_about_documents(documents, locations, options)
    del locations

    encoder = ExampleEncoder(options.max_seq_length, options.max_predictions_per_seq, vocab.size)

    def to_record(inst):
        return encoder.encode(inst.input_ids, inst.segment_b_start, inst.masked_lm_positions,
                              inst.masked_lm_ids, 1 if inst.is_random_next else 0)

    stats = InstanceStats()
    records = create_training_instances(documents, options, vocab, rng, to_record, stats,
                                        progress=progress)
    del documents

    logging.info("*** Writing to output files ***")
    for path in outputs:
        logging.info("  %s", path)
    inv_vocab = tokenizer.inv_vocab
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=len(records), unit="instance", desc="writing", mininterval=1.0)
    with RoundRobinWriter(outputs) as writer:
        for index, record in enumerate(records):
            writer.write(record)
            if index < log_examples:
                log_example(record, inv_vocab)
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    logging.info("Wrote %d total instances", len(records))
    summary = {"mode": "faithful", **stats.to_dict(),
               "invalid_lines_skipped": read_stats.invalid_lines,
               "lines_without_tokens": read_stats.empty_lines_tokens,
               "output_files": outputs, "seconds": time.time() - start}
    log_summary(summary)
    return summary


def log_summary(summary: dict) -> None:
    """Logs the final summary lines."""
    logging.info(
        "Done: %d documents (%d of one sentence), %d instances, %d tokens (%d input "
        "WordPieces), %d masked positions, %d truncated instances (%d tokens cut), IsNext "
        "%.1f%% / NotNext %.1f%%", summary["documents"], summary["single_sentence_documents"],
        summary["instances"], summary["tokens"], summary["input_tokens"],
        summary["masked_positions"], summary["truncated_instances"], summary["truncated_tokens"],
        100 * summary["is_next_share"], 100 * summary["not_next_share"])
    if "shards" in summary:
        logging.info("%d shards (%d written now, %d already finished) in %.1fs: %.0f docs/s, "
                     "%.0f instances/s", summary["shards"], summary["shards_written"],
                     summary["shards_skipped"], summary["seconds"],
                     summary["documents_per_second"], summary["instances_per_second"])
    if summary.get("invalid_lines_skipped"):
        logging.warning("%d line(s) skipped as invalid UTF-8 (first: %s)",
                        summary["invalid_lines_skipped"],
                        ", ".join(summary.get("invalid_line_examples", [])))
