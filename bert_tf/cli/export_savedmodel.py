"""`bert-tf-export-savedmodel` / tools/export_savedmodel.py: export BERT or GPT-1 as a
SavedModel (--model_type: BERT's encoder, preprocessor, classifier, squad, ner, multiple_choice;
GPT-1's gpt_lm, gpt_classifier, gpt_causal_lm).

Flags: the fields of `bert_tf.export.exporter.ExportOptions` (see docs/serving.md).
"""
from __future__ import annotations

from typing import Sequence

from bert_tf.cli import run_tool
from bert_tf.errors import UserInputError
from bert_tf.export.exporter import ExportOptions, export_savedmodel, validate_options


def export(opts: ExportOptions) -> str:
    """Checks the options, exports, returns the export path."""
    try:
        validate_options(opts)
    except ValueError as e:  # the exporter's flag checks (each names the flag)
        raise UserInputError(str(e)) from e
    return export_savedmodel(opts)


def main(argv: Sequence[str] | None = None) -> None:
    run_tool(export, ExportOptions, argv, report=print)


if __name__ == "__main__":
    main()
