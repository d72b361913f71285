"""`bert-tf-build-vocab` / tools/build_vocab.py: learn a WordPiece vocab for `FullTokenizer`.

Words are split with the original BasicTokenizer, pieces learned with tensorflow-text's WordPiece
learner; the vocab starts with [PAD], the optional [unusedN] tokens, [UNK], [CLS], [SEP], [MASK].
The file is written atomically. See bert_tf.tokenization.vocab_builder.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

from bert_tf.cli import run_tool
from bert_tf.options import option


@dataclasses.dataclass
class BuildVocabOptions:
    """Flags of tools/build_vocab.py."""

    input_file: str = option(help="Input text file(s): comma-separated paths or globs.")
    output_file: str = option(help="Where to write the vocab (one token per line).")
    vocab_size: int = option(30522, "Maximum vocab size, reserved tokens included.")
    do_lower_case: bool = option(True, "Lower-case and strip accents, as FullTokenizer will.")
    num_reserved_unused: int = option(0, "Number of [unusedN] tokens after [PAD].")
    max_lines: int | None = option(None, "Read at most this many lines in total (default: all).")


def build(opts: BuildVocabOptions) -> list[str]:
    """Learns and writes the vocab; returns it."""
    from bert_tf.tokenization.vocab_builder import build_wordpiece_vocab

    vocab = build_wordpiece_vocab(opts.input_file, opts.output_file, vocab_size=opts.vocab_size,
                                  do_lower_case=opts.do_lower_case,
                                  num_reserved_unused=opts.num_reserved_unused,
                                  max_lines=opts.max_lines)
    print(f"wrote {len(vocab)} tokens to {opts.output_file}")
    return vocab


def main(argv: Sequence[str] | None = None) -> None:
    run_tool(build, BuildVocabOptions, argv)


if __name__ == "__main__":
    main()
