"""Send raw text to a BERT model served by TF Serving (REST or gRPC) and print the outputs.

  # classifier / ner / preprocessor (one segment per example)
  python tools/serving_client.py --server=localhost:8501 --model_name=sentiment \
    --text="a great movie" --text="dull and long"
  # sentence pairs (classifier serving_pair, preprocessor serving_pair)
  python tools/serving_client.py --model_name=mnli --signature_name=serving_pair \
    --text_a="A man is eating." --text_b="Someone eats."
  # SQuAD
  python tools/serving_client.py --model_name=squad --question="Who wrote it?" \
    --context="It was written by Ann."
  # multiple choice: --choices separated by '|', one flag per example
  python tools/serving_client.py --model_name=swag --context="She opens the door." \
    --choices="She walks in.|The door eats.|It rains.|He sleeps."
  # gRPC (port 8500, needs tensorflow-serving-api)
  python tools/serving_client.py --protocol=grpc --server=localhost:8500 --model_name=sentiment \
    --text="a great movie"

Prints one JSON object: output name -> nested lists.
"""
import json
import sys

from absl import app, flags

from bert_tf.export.serving_client import ServingError, grpc_predict, rest_predict

FLAGS = flags.FLAGS
flags.DEFINE_string("server", "localhost:8501", "host:port (REST 8501, gRPC 8500 by default).")
flags.DEFINE_enum("protocol", "rest", ["rest", "grpc"], "Predict API to use.")
flags.DEFINE_string("model_name", None, "Model name in the server's model_config.")
flags.DEFINE_integer("version", None, "Model version (default: the server's choice).")
flags.DEFINE_string("signature_name", "serving_default", "Signature to run.")
flags.DEFINE_enum("format", "instances", ["instances", "inputs"], "REST request format.")
flags.DEFINE_bool("b64", False, "REST: send strings base64-encoded ({\"b64\": ...}).")
flags.DEFINE_multi_string("text", None, "Input `text` (repeat for a batch).")
flags.DEFINE_multi_string("text_a", None, "Input `text_a` (serving_pair).")
flags.DEFINE_multi_string("text_b", None, "Input `text_b` (serving_pair).")
flags.DEFINE_multi_string("question", None, "SQuAD: input `question`.")
flags.DEFINE_multi_string("context", None, "SQuAD / multiple choice: input `context`.")
flags.DEFINE_multi_string("choices", None, "Multiple choice: the choices of one example, "
                          "separated by '|'.")
flags.DEFINE_string("inputs_json", None, "Any inputs as a JSON object of batched values, e.g. "
                    "'{\"input_word_ids\": [[101, 7592, 102]], \"input_mask\": [[1, 1, 1]], "
                    "\"input_type_ids\": [[0, 0, 0]]}' with --signature_name=serving_ids.")
flags.DEFINE_float("timeout", 30.0, "Seconds to wait for the reply.")


def _inputs() -> dict:
    inputs = {}
    for name in ("text", "text_a", "text_b", "question", "context"):
        values = getattr(FLAGS, name)
        if values:
            inputs[name] = list(values)
    if FLAGS.choices:
        inputs["choices"] = [c.split("|") for c in FLAGS.choices]
    if FLAGS.inputs_json:
        try:
            extra = json.loads(FLAGS.inputs_json)
        except ValueError as e:
            sys.exit(f"serving_client: --inputs_json is not valid JSON: {e}")
        if not isinstance(extra, dict):
            sys.exit("serving_client: --inputs_json must be a JSON object {input name: values}")
        inputs.update(extra)
    return inputs


def main(_):
    inputs = _inputs()
    if not inputs:
        sys.exit("serving_client: give the signature's inputs, e.g. --text=... (see --help)")
    try:
        if FLAGS.protocol == "grpc":
            outputs = grpc_predict(FLAGS.server, FLAGS.model_name, inputs, FLAGS.signature_name,
                                   FLAGS.version, FLAGS.timeout)
        else:
            outputs = rest_predict(FLAGS.server, FLAGS.model_name, inputs, FLAGS.signature_name,
                                   FLAGS.version, FLAGS.format, FLAGS.b64, FLAGS.timeout)
    except (ServingError, ImportError, OSError) as e:
        sys.exit(f"serving_client: {e}")

    def plain(value):
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace")
        if isinstance(value, list):
            return [plain(v) for v in value]
        return value

    print(json.dumps({k: plain(v.tolist()) for k, v in outputs.items()}, ensure_ascii=False))


if __name__ == "__main__":
    flags.mark_flags_as_required(["model_name"])
    app.run(main)
