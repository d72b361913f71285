"""`bert-tf-convert-checkpoint` / tools/convert_checkpoint.py: convert BERT weights between formats.

  # Hugging Face (model.safetensors + config.json [+ vocab.txt]) -> original TF1 checkpoint
  bert-tf-convert-checkpoint --direction=hf_to_original --input=hf_dir --output=out/bert_model.ckpt
  # any original-format checkpoint -> a re-written one (encoder + heads, no optimizer slots)
  bert-tf-convert-checkpoint --direction=original_to_original --bert_config_file=bert_config.json \
      --input=model.ckpt-10000 --output=out/bert_model.ckpt
  # GPT-1: OpenAI's params folder (params_shapes.json + params_0..9.npy) <-> a .keras GptModel
  bert-tf-convert-checkpoint --direction=gpt_original_to_keras --gpt_config_file=gpt_config.json \
      --input=finetune-transformer-lm/model --output=gpt.keras
  bert-tf-convert-checkpoint --direction=gpt_keras_to_original --input=gpt.keras --output=params_dir
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

from absl import logging

from bert_tf.cli import run_tool
from bert_tf.errors import UserInputError
from bert_tf.options import option


@dataclasses.dataclass
class ConvertCheckpointOptions:
    """Flags of tools/convert_checkpoint.py."""

    input: str = option(help="Source: HF model folder / .safetensors file, or a checkpoint.")
    output: str = option(help="Checkpoint prefix to write, e.g. out/bert_model.ckpt.")
    direction: str = option("hf_to_original", "What to convert.",
                            choices=("hf_to_original", "original_to_original",
                                     "gpt_original_to_keras", "gpt_keras_to_original"))
    bert_config_file: str | None = option(None, "bert_config.json (original_to_original only).")
    gpt_config_file: str | None = option(
        None, "GPT-1 config JSON (n_vocab, n_ctx, n_embd, ...; gpt_original_to_keras only).")
    overwrite: bool = option(False, "Replace an existing checkpoint at --output.")


def convert(opts: ConvertCheckpointOptions) -> str:
    """Writes the converted checkpoint; returns its prefix."""
    from bert_tf.checkpoints import (convert_huggingface_to_original, load_original_checkpoint,
                                     save_original_checkpoint)
    from bert_tf.modeling import BertConfig, BertPretrainer

    from bert_tf import io_utils
    if not io_utils.exists(opts.input):
        raise UserInputError(f"--input={opts.input}: no such file or folder (expected the source "
                             f"of --direction={opts.direction})")
    if opts.direction in ("gpt_original_to_keras", "gpt_keras_to_original"):
        return _convert_gpt(opts)
    if opts.direction == "hf_to_original":
        prefix, config = convert_huggingface_to_original(opts.input, opts.output,
                                                         overwrite=opts.overwrite)
        logging.info("Wrote %s (+ bert_config.json): L=%d H=%d A=%d", prefix,
                     config.num_hidden_layers, config.hidden_size, config.num_attention_heads)
        return prefix
    if not opts.bert_config_file:
        raise UserInputError("--bert_config_file is required for "
                             "--direction=original_to_original")
    config = BertConfig.from_json_file(opts.bert_config_file)
    model = BertPretrainer(config).build_from_config_shapes()
    report = load_original_checkpoint(model, opts.input)
    save_original_checkpoint(model, opts.output, overwrite=opts.overwrite)
    logging.info("Wrote %s with %d variables (%d newly initialised head variables)", opts.output,
                 len(report["loaded"]) + len(report["initialized"]), len(report["initialized"]))
    return opts.output


def _convert_gpt(opts: ConvertCheckpointOptions) -> str:
    """The GPT-1 directions: OpenAI's original params folder <-> a `.keras` GptModel."""
    from bert_tf.gpt.config import GptConfig
    from bert_tf.checkpoints.openai import keras_to_original_params, original_params_to_keras

    if opts.direction == "gpt_keras_to_original":
        keras_to_original_params(opts.input, opts.output, overwrite=opts.overwrite)
        logging.info("Wrote the original params folder %s", opts.output)
        return opts.output
    if not opts.gpt_config_file:
        raise UserInputError("--gpt_config_file is required for --direction=gpt_original_to_keras")
    original_params_to_keras(opts.input, GptConfig.from_json_file(opts.gpt_config_file),
                             opts.output)
    logging.info("Wrote %s", opts.output)
    return opts.output


def main(argv: Sequence[str] | None = None) -> None:
    run_tool(convert, ConvertCheckpointOptions, argv)


if __name__ == "__main__":
    main()
