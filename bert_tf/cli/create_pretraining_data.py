"""`bert-tf-create-pretraining-data` / tools/create_pretraining_data.py: masked-LM / next-sentence
pretraining TFRecords from raw text, with the original's flags, defaults and output.

Faithful mode (the default) writes exactly the original's examples in the original's order;
`--mode=scalable` (or `--num_workers` > 1 without `--mode`) streams the corpus into resumable
shards with several processes (see docs/pretraining_data.md).
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

from bert_tf.cli import run_tool
from bert_tf.options import option
from bert_tf.pretraining_data import (PretrainingDataError, PretrainingDataOptions,
                                      create_pretraining_data, create_pretraining_data_sharded,
                                      load_tokenizer)
from bert_tf.pretraining_data.scalable import choose_mode


@dataclasses.dataclass(frozen=True, kw_only=True)
class CreatePretrainingDataRun(PretrainingDataOptions):
    """What to generate (`PretrainingDataOptions`, the original's flags) and where from/to."""

    input_file: str | None = option(None, "Input raw text file (or comma-separated list of "
                                    "files, globs allowed). Required unless --tfds_data_dir.")
    tfds_data_dir: str | None = option(
        None, "Read the corpus from the tensorflow-datasets dataset bert_pretraining_text "
        "prepared in this folder instead of --input_file (prepare it offline from local text "
        "files: bert_tf.tasks.tfds_sources.prepare); never downloads.")
    output_file: str = option(help="Output TF example file (or comma-separated list of files). "
                              "In scalable mode: the shard prefix.")
    vocab_file: str = option(help="The vocabulary file that the BERT model was trained on.")
    do_lower_case: bool = option(True, "Whether to lower case the input text. Should be True "
                                 "for uncased models and False for cased models.")
    mode: str = option("auto", "faithful: the original's exact output (one process, all "
                       "instances in memory). scalable: sharded, multi-process, bounded memory, "
                       "resumable. auto: scalable when --num_workers > 1, else faithful.",
                       choices=("auto", "faithful", "scalable"))
    num_workers: int = option(1, "Worker processes; above 1 selects scalable mode.")
    docs_per_shard: int = option(1000, "Scalable mode: documents per output shard.")
    overwrite: bool = option(False, "Scalable mode: replace shards of an earlier run with other "
                             "settings under the same --output_file prefix.")
    progress_interval: float = option(10.0, "Scalable mode: seconds between progress lines.")
    skip_invalid_lines: bool = option(False, "Skip lines that are not valid UTF-8 (counted in the "
                                      "summary) instead of stopping with an error naming file "
                                      "and line.")
    allow_prediction_cap: bool = option(
        False, "Deprecated, ignored: --max_predictions_per_seq below round(masked_lm_prob * "
        "max_seq_length) is always accepted and caps the predictions as the original does (with "
        "a warning).")

    def data_options(self) -> PretrainingDataOptions:
        """The `PretrainingDataOptions` part alone (what the generators fingerprint)."""
        return PretrainingDataOptions(**{f.name: getattr(self, f.name)
                                         for f in dataclasses.fields(PretrainingDataOptions)})


def create(run: CreatePretrainingDataRun) -> None:
    """Generates the data as `run` says (faithful or scalable mode)."""
    if run.tfds_data_dir:
        from bert_tf.pretraining_data.tfds_text import pretraining_text_file

        if run.input_file:
            raise PretrainingDataError("--input_file and --tfds_data_dir both given; pass one")
        with pretraining_text_file(run.tfds_data_dir) as path:
            return create(dataclasses.replace(run, input_file=path, tfds_data_dir=None))
    if not run.input_file:
        raise PretrainingDataError("--input_file is required (or --tfds_data_dir)")
    options = run.data_options()
    if choose_mode(run.mode, run.num_workers) == "faithful":
        tokenizer = load_tokenizer(run.vocab_file, run.do_lower_case)
        create_pretraining_data(run.input_file, run.output_file, tokenizer, options,
                                skip_invalid_lines=run.skip_invalid_lines,
                                allow_prediction_cap=run.allow_prediction_cap,
                                vocab_file=run.vocab_file, progress=True)
    else:
        create_pretraining_data_sharded(
            run.input_file, run.output_file, run.vocab_file, run.do_lower_case, options,
            num_workers=run.num_workers, docs_per_shard=run.docs_per_shard,
            skip_invalid_lines=run.skip_invalid_lines,
            allow_prediction_cap=run.allow_prediction_cap, overwrite=run.overwrite,
            progress_interval=run.progress_interval)


def main(argv: Sequence[str] | None = None) -> None:
    run_tool(create, CreatePretrainingDataRun, argv)


if __name__ == "__main__":
    main()
