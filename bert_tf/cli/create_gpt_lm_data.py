"""`tools/create_gpt_lm_data.py`: GPT-1 language-model pretraining TFRecords, contiguous
`n_ctx`-token windows of raw text (see docs/gpt_tokenization.md).

Input: the same format as create_pretraining_data.py (one sentence per line, a blank line
between documents; comma-separated files or globs, `.gz` allowed). Output: shards
`<output_file>-NNNNN.tfrecord` of `tf.train.Example`s with one feature `input_ids` [n_ctx]
(contiguous text; every document is followed by a separator token: `\\n</w>` for the BPE,
`[SEP]` for WordPiece), written by several processes, deterministic for a seed and resumable
(re-run the same command after a crash)::

  # The original GPT-1 BPE (needs the [gpt] extra: ftfy, spaCy)
  python tools/create_gpt_lm_data.py --input_file='corpus/*.txt.gz' --output_file=/data/gpt/lm \\
    --encoder_path=model/encoder_bpe_40000.json --bpe_path=model/vocab_40000.bpe \\
    --n_ctx=512 --held_out_fraction=0.01 --num_workers=8

  # BERT's WordPiece vocabulary (the BERT paper's LTR model)
  python tools/create_gpt_lm_data.py --input_file=corpus.txt --output_file=/data/ltr/lm \\
    --vocab_file=vocab.txt --do_lower_case=True --n_ctx=128

Read the windows with `bert_tf.pretraining_data.gpt_lm.lm_dataset("/data/gpt/lm-*.tfrecord", n_ctx=512)`.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

from bert_tf.cli import run_tool
from bert_tf.pretraining_data.gpt_lm import EncoderSpec, LmDataOptions, create_gpt_lm_data
from bert_tf.options import option


@dataclasses.dataclass(frozen=True, kw_only=True)
class CreateGptLmDataRun:
    """The tool's flags (named as create_pretraining_data.py's where the meaning is the same)."""

    input_file: str = option(help="Input raw text file (or comma-separated list of files, globs "
                             "allowed; .gz read on the fly).")
    output_file: str = option(help="Output prefix: shards <output_file>-NNNNN.tfrecord (and "
                              "<output_file>_heldout-NNNNN.tfrecord with --held_out_fraction).")
    vocab_file: str | None = option(None, "A WordPiece vocab (instead of the BPE files).")
    do_lower_case: bool = option(True, "With --vocab_file: lower-case the input text.")
    encoder_path: str | None = option(None, "The original BPE encoder, encoder_bpe_40000.json.")
    bpe_path: str | None = option(None, "The original BPE merges, vocab_40000.bpe.")
    n_ctx: int = option(512, "Tokens per window (the model's context length).")
    random_seed: int = option(12345, "Random seed (decides the held-out split).")
    held_out_fraction: float = option(0.0, "Share of documents written to the held-out split "
                                      "<output_file>_heldout-NNNNN.tfrecord (0: none).")
    document_separator: str = option("auto", "Token appended after every document: 'auto' "
                                     "(\\n</w> for the BPE, [SEP] for WordPiece), 'none', or a "
                                     "vocabulary token.")
    num_workers: int = option(1, "Worker processes (the output does not depend on it).")
    docs_per_shard: int = option(1000, "Documents per output shard.")
    overwrite: bool = option(False, "Replace the shards of an earlier run with other settings "
                             "under the same --output_file.")
    skip_invalid_lines: bool = option(False, "Skip lines that are not valid UTF-8 (counted in "
                                      "the summary) instead of stopping.")


def create(run: CreateGptLmDataRun) -> dict:
    """Writes the windows as `run` says; returns the summary."""
    spec = EncoderSpec(encoder_path=run.encoder_path, bpe_path=run.bpe_path,
                       vocab_file=run.vocab_file, do_lower_case=run.do_lower_case)
    options = LmDataOptions(n_ctx=run.n_ctx, random_seed=run.random_seed,
                            held_out_fraction=run.held_out_fraction,
                            document_separator=run.document_separator,
                            docs_per_shard=run.docs_per_shard)
    return create_gpt_lm_data(run.input_file, run.output_file, spec, options,
                              num_workers=run.num_workers,
                              skip_invalid_lines=run.skip_invalid_lines, overwrite=run.overwrite)


def main(argv: Sequence[str] | None = None) -> None:
    run_tool(create, CreateGptLmDataRun, argv)


if __name__ == "__main__":
    main()
