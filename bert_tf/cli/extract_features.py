"""`bert-tf-extract-features` / tools/extract_features.py: fixed contextual features (chosen
encoder layers) for each input line, with the original extract_features.py's flags, input
(`text` or `text_a ||| text_b` lines) and output (JSON lines, values rounded to 6 decimals).
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

from absl import logging

from bert_tf.cli import run_tool
from bert_tf.errors import UserInputError
from bert_tf.options import option
from bert_tf.training.distribution import DistributionOptions
from bert_tf.training.precision import (FINETUNING_PRECISION_POLICIES,
                                        runs_under_precision_policy)


@dataclasses.dataclass(kw_only=True)
class ExtractFeaturesOptions(DistributionOptions):
    """The original extract_features.py flags. The TPU flags are accepted for drop-in command
    lines; features are computed on the local devices (`--mixed_precision=mixed_bfloat16`:
    in 16 bits, written as float32 values)."""

    input_file: str = option(help="Text file, one example per line (`a` or `a ||| b`).")
    output_file: str = option(help="JSON-lines output file.")
    layers: str = option("-1,-2,-3,-4", "Comma-separated encoder layer indexes.")
    bert_config_file: str = option(help="The config json file corresponding to the pre-trained "
                                   "BERT model. This specifies the model architecture.")
    max_seq_length: int = option(128, "The maximum total input sequence length after WordPiece "
                                 "tokenization. Sequences longer than this will be truncated, "
                                 "and sequences shorter than this will be padded.")
    init_checkpoint: str = option(help="Initial checkpoint (usually from a pre-trained BERT "
                                  "model; original TF1 names).")
    vocab_file: str = option(help="The vocabulary file that the BERT model was trained on.")
    do_lower_case: bool = option(True, "Whether to lower case the input text. Should be True "
                                 "for uncased models and False for cased models.")
    batch_size: int = option(32, "Batch size for predictions.")
    use_one_hot_embeddings: bool = option(False, "Accepted for the original's command lines; "
                                          "embeddings are always gathered.")


@runs_under_precision_policy(FINETUNING_PRECISION_POLICIES)
def extract(opts: ExtractFeaturesOptions) -> int:
    """Writes the features of every input line; returns the number of examples."""
    from bert_tf.tasks import feature_extraction
    from bert_tf.pretrained import load_bert

    if opts.strategy_name != "one_device":
        logging.warning("--use_tpu/--distribution_strategy are ignored by extract_features; "
                        "running on the local devices")
    from bert_tf import io_utils
    if io_utils.isdir(opts.output_file):
        raise UserInputError(f"--output_file={opts.output_file} is a folder; expected a file "
                             "path for the JSON-lines features")
    config, tokenizer, encoder = load_bert(opts.bert_config_file, opts.vocab_file,
                                           opts.init_checkpoint, opts.do_lower_case)
    if opts.max_seq_length > config.max_position_embeddings:
        raise UserInputError(f"--max_seq_length={opts.max_seq_length} is longer than "
                             f"max_position_embeddings={config.max_position_embeddings}")
    layer_indexes = feature_extraction.parse_layer_indexes(opts.layers, config.num_hidden_layers)
    examples = feature_extraction.read_examples(opts.input_file)
    records = feature_extraction.extract_features(encoder, tokenizer, examples, layer_indexes,
                                                  opts.max_seq_length, opts.batch_size)
    n = feature_extraction.write_features(records, opts.output_file)
    logging.info("Wrote features of %d examples to %s", n, opts.output_file)
    return n


def main(argv: Sequence[str] | None = None) -> None:
    run_tool(extract, ExtractFeaturesOptions, argv)


if __name__ == "__main__":
    main()
