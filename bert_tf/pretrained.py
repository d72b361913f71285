"""Loading a pretrained BERT as users receive one: `bert_config.json` + `vocab.txt` + checkpoint."""
from __future__ import annotations

import os

from bert_tf import io_utils
from bert_tf.checkpoints import load_original_checkpoint
from bert_tf.modeling import BertConfig, BertEncoder


def count_vocab_lines(vocab_file: str) -> int:
    """Number of tokens in a vocab file (one per line)."""
    with io_utils.open_file(vocab_file, "rb") as f:
        return sum(1 for _ in f)


def check_vocab_matches_config(vocab_file: str, config: BertConfig, config_file: str = "") -> None:
    """Raises ValueError if the vocab's line count is not the config's `vocab_size`."""
    if not io_utils.exists(vocab_file):
        raise ValueError(f"vocab file {vocab_file} does not exist")
    n = count_vocab_lines(vocab_file)
    if n != config.vocab_size:
        raise ValueError(
            f"vocab file {vocab_file} has {n} tokens but vocab_size is {config.vocab_size}"
            f"{' in ' + config_file if config_file else ''}; they must be the same model's files")


def load_tokenizer(vocab_file: str, do_lower_case: bool = True):
    """The original-compatible `FullTokenizer` for a vocab file."""
    from bert_tf.tokenization import FullTokenizer

    return FullTokenizer(vocab_file=vocab_file, do_lower_case=do_lower_case)


def load_bert(bert_config_file: str, vocab_file: str | None = None,
              init_checkpoint: str | None = None, do_lower_case: bool = True,
              model_factory=BertEncoder, heads: str = "if_present"):
    """Builds a model from `bert_config.json`, checks the vocab, and loads a checkpoint.

    Args:
      bert_config_file: original-format config.
      vocab_file: WordPiece vocab; its size must equal `vocab_size` (None: no tokenizer).
      init_checkpoint: original-format (TF1-named) checkpoint, or None for fresh weights.
      do_lower_case: for the tokenizer.
      model_factory: called with the config to build the model (`BertEncoder`, or e.g.
        `lambda c: BertClassifier(c, num_labels=2)`).
      heads: how head variables are loaded (see `load_original_checkpoint`).

    Returns:
      (config, tokenizer or None, model).
    """
    config = BertConfig.from_json_file(bert_config_file)
    tokenizer = None
    if vocab_file is not None:
        check_vocab_matches_config(vocab_file, config, bert_config_file)
        tokenizer = load_tokenizer(vocab_file, do_lower_case)
    model = model_factory(config)
    model.build_from_config_shapes()
    if init_checkpoint:
        load_original_checkpoint(model, init_checkpoint, heads=heads)
    return config, tokenizer, model
