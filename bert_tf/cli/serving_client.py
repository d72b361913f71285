"""`bert-tf-serving-client` / tools/serving_client.py: send raw text to a BERT model served by TF
Serving (REST or gRPC), or run it on a SavedModel folder without a server (`--saved_model_dir`),
and print the outputs as one JSON object (output name -> nested lists; the same JSON either way).

  bert-tf-serving-client --server=localhost:8501 --model_name=sentiment --text="a great movie"
  bert-tf-serving-client --model_name=mnli --signature_name=serving_pair --text_a=.. --text_b=..
  bert-tf-serving-client --model_name=squad --question="Who wrote it?" --context="By Ann."
  bert-tf-serving-client --model_name=swag --context=".." --choices="a|b|c|d"
  bert-tf-serving-client --protocol=grpc --server=localhost:8500 --model_name=sentiment --text=..
  bert-tf-serving-client --saved_model_dir=/models/sentiment --text="a great movie"
"""
from __future__ import annotations

import dataclasses
import json
from typing import Sequence

from bert_tf.cli import run_tool
from bert_tf.errors import UserInputError
from bert_tf.options import option


@dataclasses.dataclass
class ServingClientOptions:
    """Flags of tools/serving_client.py."""

    model_name: str | None = option(None, "Model name in the server's model_config (needed "
                                    "unless --saved_model_dir).")
    saved_model_dir: str | None = option(
        None, "Answer from this SavedModel without a server: a version folder or a model base "
        "path (its highest version, or --version). --server, --protocol, --format and --b64 "
        "do not apply.")
    server: str = option("localhost:8501", "host:port (REST 8501, gRPC 8500 by default).")
    protocol: str = option("rest", "Predict API to use.", choices=("rest", "grpc"))
    version: int | None = option(None, "Model version (default: the server's choice).")
    signature_name: str = option("serving_default", "Signature to run.")
    format: str = option("instances", "REST request format.", choices=("instances", "inputs"))
    b64: bool = option(False, "REST: send strings base64-encoded ({\"b64\": ...}).")
    text: list[str] | None = option(None, "Input `text` (repeat for a batch).", multi=True)
    text_a: list[str] | None = option(None, "Input `text_a` (serving_pair).", multi=True)
    text_b: list[str] | None = option(None, "Input `text_b` (serving_pair).", multi=True)
    question: list[str] | None = option(None, "SQuAD: input `question`.", multi=True)
    context: list[str] | None = option(None, "SQuAD / multiple choice: input `context`.",
                                       multi=True)
    choices: list[str] | None = option(None, "Multiple choice: the choices of one example, "
                                       "separated by '|'.", multi=True)
    inputs_json: str | None = option(
        None, "Any inputs as a JSON object of batched values, e.g. '{\"input_word_ids\": [[101, "
        "7592, 102]], \"input_mask\": [[1, 1, 1]], \"input_type_ids\": [[0, 0, 0]]}' with "
        "--signature_name=serving_ids.")
    timeout: float = option(30.0, "Seconds to wait for the reply.")

    def inputs(self) -> dict:
        """The request's inputs from the text flags and --inputs_json."""
        inputs = {}
        for name in ("text", "text_a", "text_b", "question", "context"):
            values = getattr(self, name)
            if values:
                inputs[name] = list(values)
        if self.choices:
            inputs["choices"] = [c.split("|") for c in self.choices]
        if self.inputs_json:
            try:
                extra = json.loads(self.inputs_json)
            except ValueError as e:
                raise UserInputError(f"--inputs_json is not valid JSON: {e}") from None
            if not isinstance(extra, dict):
                raise UserInputError("--inputs_json must be a JSON object {input name: values}")
            inputs.update(extra)
        if not inputs:
            raise UserInputError("give the signature's inputs, e.g. --text=... (see --help)")
        return inputs


def _plain(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def predict(opts: ServingClientOptions) -> dict:
    """Sends the request (or runs --saved_model_dir); prints and returns the outputs as
    JSON-ready lists."""
    from bert_tf.export.serving_client import ServingError, grpc_predict, rest_predict

    if not opts.saved_model_dir and not opts.model_name:
        raise UserInputError("give --model_name (the served model) or --saved_model_dir (a "
                             "SavedModel folder, no server)")
    inputs = opts.inputs()
    try:
        if opts.saved_model_dir:
            from bert_tf.export.serving_client import saved_model_predict

            outputs = saved_model_predict(opts.saved_model_dir, inputs, opts.signature_name,
                                          opts.version)
        elif opts.protocol == "grpc":
            outputs = grpc_predict(opts.server, opts.model_name, inputs, opts.signature_name,
                                   opts.version, opts.timeout)
        else:
            outputs = rest_predict(opts.server, opts.model_name, inputs, opts.signature_name,
                                   opts.version, opts.format, opts.b64, opts.timeout)
    except (ServingError, ImportError, OSError) as e:
        raise UserInputError(str(e)) from e
    result = {k: _plain(v.tolist()) for k, v in outputs.items()}
    print(json.dumps(result, ensure_ascii=False))
    return result


def main(argv: Sequence[str] | None = None) -> None:
    run_tool(predict, ServingClientOptions, argv)


if __name__ == "__main__":
    main()
