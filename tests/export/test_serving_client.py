"""Serving client logic without a server: the JSON built for REST (instances / inputs, b64
strings), parsing of the reply shapes TF Serving sends, errors, URLs, and the gRPC request when
tensorflow-serving-api is installed."""
from __future__ import annotations

import base64
import json
import pathlib

import numpy as np
import pytest

from bert_tf.export.serving_client import (ServingError, grpc_predict_request,
                                           parse_rest_response, rest_predict_url,
                                           rest_request_body)


def test_instances_body():
    body = rest_request_body({"text_a": ["A man eats.", "x"], "text_b": ["He eats.", "y"]},
                             signature_name="serving_pair")
    assert json.loads(json.dumps(body)) == {
        "signature_name": "serving_pair",
        "instances": [{"text_a": "A man eats.", "text_b": "He eats."},
                      {"text_a": "x", "text_b": "y"}]}


def test_inputs_body_with_ids_and_choices():
    ids = np.array([[101, 7592, 102]], np.int32)
    body = rest_request_body({"input_word_ids": ids, "input_mask": np.ones_like(ids),
                              "input_type_ids": np.zeros_like(ids)},
                             signature_name="serving_ids", fmt="inputs")
    assert body == {"signature_name": "serving_ids",
                    "inputs": {"input_word_ids": [[101, 7592, 102]], "input_mask": [[1, 1, 1]],
                               "input_type_ids": [[0, 0, 0]]}}
    body = rest_request_body({"context": ["She opens the door."],
                              "choices": [["She walks in.", "It rains."]]})
    assert body["instances"] == [{"context": "She opens the door.",
                                  "choices": ["She walks in.", "It rains."]}]


def test_b64_strings():
    body = rest_request_body({"text": ["café", b"\xff\xfe raw"]}, b64=False)
    assert body["instances"][0] == {"text": "café"}
    assert body["instances"][1] == {"text": {"b64": base64.b64encode(b"\xff\xfe raw").decode()}}
    body = rest_request_body({"text": ["café"]}, fmt="inputs", b64=True)
    assert body["inputs"] == {"text": [{"b64": base64.b64encode("café".encode()).decode()}]}


def test_bad_requests():
    with pytest.raises(ValueError, match="same batch size"):
        rest_request_body({"text_a": ["a", "b"], "text_b": ["c"]})
    with pytest.raises(ValueError, match="fmt must be one of"):
        rest_request_body({"text": ["a"]}, fmt="rows")
    with pytest.raises(ValueError, match="at least one input"):
        rest_request_body({})


def test_parse_instances_reply():
    reply = {"predictions": [
        {"probabilities": [0.1, 0.9], "label_ids": 1, "labels": "positive"},
        {"probabilities": [0.8, 0.2], "label_ids": 0, "labels": {"b64": "bmVnYXRpdmU="}}]}
    out = parse_rest_response(reply)
    np.testing.assert_allclose(out["probabilities"], [[0.1, 0.9], [0.8, 0.2]])
    assert out["label_ids"].tolist() == [1, 0]
    assert out["labels"].tolist() == [b"positive", b"negative"]
    # A signature with one output: the server leaves out its name.
    single = parse_rest_response({"predictions": [[1, 2], [3, 4]]},
                                 output_names=["input_word_ids"])
    assert single["input_word_ids"].tolist() == [[1, 2], [3, 4]]


def test_parse_inputs_reply_and_errors():
    reply = {"outputs": {"start_logits": [[0.5, 1.5]], "end_logits": [[2.0, -1.0]],
                         "start_index": [1], "end_index": [0]}}
    out = parse_rest_response(reply, fmt="inputs")
    assert out["start_logits"].shape == (1, 2) and out["start_index"].tolist() == [1]
    with pytest.raises(ServingError, match="Expects arg\\[0\\] to be string"):
        parse_rest_response({"error": "Expects arg[0] to be string but int32 is provided"})
    with pytest.raises(ValueError, match="needs 'predictions'"):
        parse_rest_response({"outputs": {}}, fmt="instances")


def test_urls():
    assert rest_predict_url("localhost:8501", "bert") == (
        "http://localhost:8501/v1/models/bert:predict")
    assert rest_predict_url("https://h:1/", "bert", 2) == "https://h:1/v1/models/bert/versions/2:predict"


def test_grpc_request():
    pytest.importorskip("tensorflow_serving.apis.predict_pb2",
                        reason="tensorflow-serving-api is not installed (the REST client needs "
                               "nothing extra)")
    request = grpc_predict_request("bert", {"text": ["a", "ü", b"\xff"]}, "serving_default", 3)
    assert request.model_spec.name == "bert" and request.model_spec.version.value == 3
    assert request.model_spec.signature_name == "serving_default"
    assert request.inputs["text"].string_val == [b"a", "ü".encode(), b"\xff"]
    assert request.inputs["text"].dtype == 7  # DT_STRING
    ids = np.array([[101, 102]], np.int32)
    request = grpc_predict_request("bert", {"input_word_ids": ids,
                                            "choices": [["x", "y"]]}, "serving_ids")
    assert request.inputs["input_word_ids"].dtype == 3  # DT_INT32
    assert [d.size for d in request.inputs["input_word_ids"].tensor_shape.dim] == [1, 2]
    assert [d.size for d in request.inputs["choices"].tensor_shape.dim] == [1, 2]
    # Parsed JSON (Python ints) becomes int32, what the id signatures take.
    request = grpc_predict_request("bert", {"input_word_ids": [[101, 102]]}, "serving_ids")
    assert request.inputs["input_word_ids"].dtype == 3


def test_grpc_without_the_package_says_what_to_install(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name.startswith("tensorflow_serving"):
            raise ImportError("no module")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(ImportError, match="pip install tensorflow-serving-api"):
        grpc_predict_request("bert", {"text": ["a"]})


def _send_json(handler, reply, code: int = 200) -> None:
    """Writes `reply` as a JSON HTTP response from an http.server handler (the fake servers)."""
    data = json.dumps(reply).encode()
    handler.send_response(code)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def test_rest_round_trip_against_a_canned_server():
    """rest_predict posts the JSON to the :predict URL and parses the reply; an error reply
    (HTTP 400 with {"error": ...}, as TF Serving sends) becomes a ServingError."""
    import http.server
    import threading

    from bert_tf.export.serving_client import rest_predict

    received = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's naming)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            received.append((self.path, body))
            if body.get("signature_name") == "missing":
                reply, code = {"error": "Serving signature name: \"missing\" not found"}, 400
            else:
                reply, code = {"outputs": {"label_ids": [1], "labels": ["positive"]}}, 200
            _send_json(self, reply, code)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        address = f"127.0.0.1:{server.server_port}"
        out = rest_predict(address, "sentiment", {"text": ["a fine film"]}, version=2,
                           fmt="inputs")
        assert out["label_ids"].tolist() == [1] and out["labels"].tolist() == [b"positive"]
        assert received[0] == ("/v1/models/sentiment/versions/2:predict",
                               {"signature_name": "serving_default",
                                "inputs": {"text": ["a fine film"]}})
        with pytest.raises(ServingError, match="not found"):
            rest_predict(address, "sentiment", {"text": ["x"]}, signature_name="missing")
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.long
def test_grpc_round_trip_against_a_prediction_service_running_an_export(exports):
    """grpc_predict against an in-process tensorflow.serving.PredictionService that evaluates the
    classifier export's signatures as the server does (TensorProto in, TensorProto out): raw text
    and ids give the SavedModel's own answers; an unknown signature and a wrong-dtype input come
    back as ServingError with the server's status code."""
    pytest.importorskip("tensorflow_serving.apis.predict_pb2",
                        reason="tensorflow-serving-api is not installed (the REST client needs "
                               "nothing extra)")
    from concurrent import futures

    import grpc
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the export's tokenizer ops)
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    from bert_tf.export.serving_client import grpc_predict

    loaded = tf.saved_model.load(str(exports["classifier"]))
    seen = []

    class Service(prediction_service_pb2_grpc.PredictionServiceServicer):
        def Predict(self, request, context):  # noqa: N802 (the proto's name)
            seen.append(request)
            name = request.model_spec.signature_name or "serving_default"
            if name not in loaded.signatures:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                              f"Serving signature name: \"{name}\" not found in signature def")
            fn = loaded.signatures[name]
            args = {}
            for key, proto in request.inputs.items():
                spec = fn.structured_input_signature[1][key]
                if tf.dtypes.as_dtype(proto.dtype) != spec.dtype:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                  f"Expects arg[{key}] to be {spec.dtype.name} but "
                                  f"{tf.dtypes.as_dtype(proto.dtype).name} is provided")
                args[key] = tf.constant(tf.make_ndarray(proto))
            reply = predict_pb2.PredictResponse()
            for key, value in fn(**args).items():
                reply.outputs[key].CopyFrom(tf.make_tensor_proto(value.numpy()))
            return reply

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(Service(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        address = f"127.0.0.1:{port}"
        texts = ["a gripping film", "dull and far too long"]
        out = grpc_predict(address, "sentiment", {"text": texts}, version=1)
        expected = loaded.signatures["serving_default"](text=tf.constant(texts))
        assert seen[-1].model_spec.version.value == 1
        assert set(out) == set(expected)
        np.testing.assert_array_equal(out["probabilities"], expected["probabilities"].numpy())
        np.testing.assert_array_equal(out["label_ids"], expected["label_ids"].numpy())

        ids_fn = loaded.signatures["serving_ids"]
        packed = tf.saved_model.load(str(exports["preprocessor"])).signatures["serving_default"]
        ids = {k: v.numpy() for k, v in packed(text=tf.constant(texts)).items()}
        out = grpc_predict(address, "sentiment", {k: v.tolist() for k, v in ids.items()},
                           signature_name="serving_ids")
        np.testing.assert_allclose(out["probabilities"],
                                   ids_fn(**{k: tf.constant(v) for k, v in ids.items()})
                                   ["probabilities"].numpy(), atol=1e-6)
        np.testing.assert_allclose(out["probabilities"], expected["probabilities"].numpy(),
                                   atol=1e-6)

        with pytest.raises(ServingError, match="FAILED_PRECONDITION.*not found"):
            grpc_predict(address, "sentiment", {"text": texts}, signature_name="missing")
        with pytest.raises(ServingError, match="INVALID_ARGUMENT.*int32"):
            grpc_predict(address, "sentiment",
                         {k: v.astype(np.int64) for k, v in ids.items()},
                         signature_name="serving_ids")
    finally:
        server.stop(None)


# ---------------------------------------------------------------------------------------------
# Connection errors, --saved_model_dir (no server)
# ---------------------------------------------------------------------------------------------
def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_connection_errors_name_the_url():
    from bert_tf.export.serving_client import rest_predict

    port = _closed_port()
    url = f"http://127.0.0.1:{port}/v1/models/sentiment/versions/3:predict"
    with pytest.raises(ServingError) as error:
        rest_predict(f"127.0.0.1:{port}", "sentiment", {"text": ["a"]}, version=3, timeout=5)
    assert str(error.value).startswith(f"cannot reach {url}: ")
    # the command line: one error line with the URL
    from bert_tf.cli.serving_client import ServingClientOptions, predict
    from bert_tf.errors import UserInputError

    with pytest.raises(UserInputError, match=f"cannot reach http://127.0.0.1:{port}/v1/models/m"):
        predict(ServingClientOptions(model_name="m", server=f"127.0.0.1:{port}", text=["a"],
                                     timeout=5))
    with pytest.raises(UserInputError, match="give --model_name .* or --saved_model_dir"):
        predict(ServingClientOptions(text=["a"]))


def test_saved_model_dir_resolution(tmp_path):
    from bert_tf.export.serving_client import resolve_saved_model_dir

    base = tmp_path / "sentiment"
    for version in ("1", "2", "10"):
        (base / version).mkdir(parents=True)
        (base / version / "saved_model.pb").write_bytes(b"")
    (base / "3").mkdir()  # no saved_model.pb: not a version
    (base / ".1.tmp-123").mkdir()
    assert resolve_saved_model_dir(str(base)) == str(base / "10")  # the highest, as TF Serving
    assert resolve_saved_model_dir(str(base), 2) == str(base / "2")
    assert resolve_saved_model_dir(str(base / "1")) == str(base / "1")
    with pytest.raises(ServingError, match=r"--version=3: .* has versions 1, 2, 10"):
        resolve_saved_model_dir(str(base), 3)
    with pytest.raises(ServingError, match="holds no saved_model.pb and no version folder"):
        resolve_saved_model_dir(str(base / "3"))
    with pytest.raises(ServingError, match="is not a directory"):
        resolve_saved_model_dir(str(tmp_path / "nowhere"))


def _tf_serving_rest_server(loaded):
    """An HTTP server answering :predict as TF Serving's REST API does, from `loaded`'s
    signatures (row and columnar formats; {"error": ...} with HTTP 400)."""
    import http.server
    import threading

    import tensorflow as tf

    def jsonable(array):
        if array.dtype.kind in "OS":
            return [jsonable(a) if isinstance(a, np.ndarray) else a.decode()
                    for a in array] if array.ndim else array.item().decode()
        return array.tolist()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's naming)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            fn = loaded.signatures[body.get("signature_name", "serving_default")]
            if "instances" in body:
                columns = {k: [row[k] for row in body["instances"]] for k in body["instances"][0]}
            else:
                columns = body["inputs"]
            specs = fn.structured_input_signature[1]
            args = {k: tf.constant(v, specs[k].dtype) for k, v in columns.items()}
            outputs = {k: v.numpy() for k, v in fn(**args).items()}
            if "instances" in body:
                n = len(body["instances"])
                reply = {"predictions": [{k: jsonable(v[i:i + 1])[0] for k, v in outputs.items()}
                                         for i in range(n)]}
            else:
                reply = {"outputs": {k: jsonable(v) for k, v in outputs.items()}}
            _send_json(self, reply)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.long
def test_saved_model_dir_answers_the_rest_json(exports, capsys):
    """`serving_client --saved_model_dir` prints the JSON the REST path prints for the same
    request (here a local server answering as TF Serving's REST API from the same export):
    raw text, pairs, ids; the tool as a subprocess too; bad requests are one line."""
    import subprocess
    import sys

    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the export's tokenizer ops)

    from bert_tf.cli.serving_client import ServingClientOptions, predict
    from bert_tf.errors import UserInputError
    from serving_setup import CLASSIFIER_LABELS

    version = exports["classifier"]
    base = version.parent
    loaded = tf.saved_model.load(str(version))
    server = _tf_serving_rest_server(loaded)
    try:
        address = f"127.0.0.1:{server.server_port}"
        texts = ["a gripping film", "dull and far too long, really"]
        requests = [dict(text=texts),
                    dict(text_a=texts, text_b=texts[::-1], signature_name="serving_pair"),
                    dict(inputs_json=json.dumps({"input_word_ids": [[101, 7592, 102]],
                                                 "input_mask": [[1, 1, 1]],
                                                 "input_type_ids": [[0, 0, 0]]}),
                         signature_name="serving_ids")]
        for request in requests:
            for fmt in ("instances", "inputs"):
                rest = predict(ServingClientOptions(model_name="m", server=address, format=fmt,
                                                    **request))
                local = predict(ServingClientOptions(saved_model_dir=str(base), **request))
                assert set(local) == set(rest)
                for key in rest:
                    if key == "labels":
                        assert local[key] == rest[key]
                        assert set(local[key]) <= set(CLASSIFIER_LABELS)
                    else:
                        np.testing.assert_allclose(local[key], rest[key], rtol=0, atol=1e-6)
        expected = loaded.signatures["serving_default"](text=tf.constant(texts))
        local = predict(ServingClientOptions(saved_model_dir=str(version), text=texts))
        np.testing.assert_array_equal(np.array(local["probabilities"], np.float32),
                                      expected["probabilities"].numpy())
    finally:
        server.shutdown()
        server.server_close()
    capsys.readouterr()
    with pytest.raises(UserInputError, match=r"not found in .* \(it has serving_default, "
                                             r"serving_ids, serving_pair\)"):
        predict(ServingClientOptions(saved_model_dir=str(base), text=texts,
                                     signature_name="missing"))
    with pytest.raises(UserInputError, match=r"takes inputs \['text_a', 'text_b'\]; missing "
                                             r"\['text_b'\]"):
        predict(ServingClientOptions(saved_model_dir=str(base), text_a=texts,
                                     signature_name="serving_pair"))
    proc = subprocess.run(
        [sys.executable, "tools/serving_client.py", f"--saved_model_dir={base}",
         f"--text={texts[0]}"], capture_output=True, text=True, timeout=300,
        cwd=pathlib.Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stderr[-2000:]
    printed = json.loads(proc.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(printed["probabilities"], expected["probabilities"].numpy()[:1],
                               atol=1e-6)
    assert printed["labels"] == [CLASSIFIER_LABELS[expected["label_ids"].numpy()[0]]]


@pytest.mark.long
def test_saved_model_cli_needs_tensorflow_text_loaded_first(exports):
    """docs/serving.md: `saved_model_cli run` on a raw-text export fails with "Op type not
    registered 'NormalizeUTF8'" (the tool never imports tensorflow_text); the same tool started
    from a Python that imported tensorflow_text first runs it."""
    import subprocess
    import sys

    version = str(exports["preprocessor"])
    args = ["run", "--dir", version, "--tag_set", "serve", "--signature_def", "serving_default",
            "--input_exprs", 'text=["a gripping film"]']
    plain = subprocess.run([sys.executable, "-c", "import sys; from tensorflow.python.tools."
                            "saved_model_cli import main; sys.exit(main())", *args],
                           capture_output=True, text=True, timeout=600)
    assert plain.returncode != 0
    assert "Op type not registered 'NormalizeUTF8'" in plain.stderr
    wrapped = subprocess.run([sys.executable, "-c", "import sys, tensorflow_text; from "
                              "tensorflow.python.tools.saved_model_cli import main; "
                              "sys.exit(main())", *args],
                             capture_output=True, text=True, timeout=600)
    assert wrapped.returncode == 0, wrapped.stderr[-2000:]
    assert "Result for output key input_word_ids" in wrapped.stdout
    assert "[[  101" in wrapped.stdout  # [CLS] first
