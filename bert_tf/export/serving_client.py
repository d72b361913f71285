"""Clients for TF Serving's Predict API: REST (JSON) and gRPC (tensorflow-serving-api).

Request building and response parsing are plain functions (testable without a server):

  body = rest_request_body({"text": ["a great movie", "dull"]}, fmt="instances")
  # {"signature_name": "serving_default", "instances": [{"text": "a great movie"}, ...]}
  outputs = parse_rest_response(json.loads(reply), fmt="instances")  # {name: np.ndarray}

Strings that are not valid UTF-8 (bytes) — or all strings with `b64=True` — are sent as
`{"b64": "<base64>"}`, which TF Serving decodes into the DT_STRING tensor.
"""
from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from typing import Any, Mapping, Sequence

import numpy as np

REST_FORMATS = ("instances", "inputs")


class ServingError(RuntimeError):
    """The server answered with an error (its message is kept verbatim)."""


def _json_value(value: Any, b64: bool) -> Any:
    """numpy/python value -> JSON-able value (strings maybe as {"b64": ...})."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "OSU":
            return [_json_value(v, b64) for v in value.tolist()]
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_json_value(v, b64) for v in value]
    if isinstance(value, bytes):
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError:
            return {"b64": base64.b64encode(value).decode("ascii")}
        return {"b64": base64.b64encode(value).decode("ascii")} if b64 else text
    if isinstance(value, str):
        return {"b64": base64.b64encode(value.encode("utf-8")).decode("ascii")} if b64 else value
    if isinstance(value, np.generic):
        return value.item()
    return value


def _batch_size(inputs: Mapping[str, Any]) -> int:
    sizes = {k: len(v) for k, v in inputs.items()}
    if len(set(sizes.values())) != 1:
        raise ValueError(f"all inputs need the same batch size; got {sizes}")
    return next(iter(sizes.values()))


def rest_request_body(inputs: Mapping[str, Sequence[Any] | np.ndarray],
                      signature_name: str = "serving_default", fmt: str = "instances",
                      b64: bool = False) -> dict:
    """The JSON body of a REST :predict request.

    Args:
      inputs: signature input name -> batch of values (first dimension = batch), e.g.
        {"text": ["..."]} or {"input_word_ids": [[101, ...]], ...}.
      signature_name: signature to run.
      fmt: "instances" (row format: one object per example) or "inputs" (columnar format).
      b64: send every string base64-encoded ({"b64": ...}); bytes that are not valid UTF-8 are
        always sent that way.

    Returns:
      A dict to serialize with json.dumps.
    """
    if fmt not in REST_FORMATS:
        raise ValueError(f"fmt must be one of {REST_FORMATS}, got {fmt!r}")
    if not inputs:
        raise ValueError("a request needs at least one input")
    body: dict[str, Any] = {"signature_name": signature_name}
    if fmt == "inputs":
        body["inputs"] = {k: _json_value(v, b64) for k, v in inputs.items()}
        return body
    n = _batch_size(inputs)
    columns = {k: _json_value(v, b64) for k, v in inputs.items()}
    body["instances"] = [{k: columns[k][i] for k in columns} for i in range(n)]
    return body


def _from_json(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"b64"}:
        return base64.b64decode(value["b64"])
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    if isinstance(value, str):
        return value.encode("utf-8")
    return value


def _to_array(values: Any) -> np.ndarray:
    values = _from_json(values)
    array = np.array(values)
    if array.dtype.kind == "S":  # Keep bytes as objects, as TensorFlow returns tf.string.
        array = np.array(values, dtype=object)
    return array


def parse_rest_response(response: Mapping[str, Any], fmt: str = "instances",
                        output_names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """A REST :predict reply (parsed JSON) -> {output name: array with the batch first}.

    Args:
      response: json.loads of the reply.
      fmt: the request's format ("instances" replies carry "predictions", "inputs" replies
        "outputs").
      output_names: for a signature with a single output the server drops its name; give the
        name here (default "output").

    Raises:
      ServingError: the reply is {"error": ...}.
    """
    if "error" in response:
        raise ServingError(str(response["error"]))
    single = (output_names or ["output"])[0]
    if fmt == "instances":
        if "predictions" not in response:
            raise ValueError(f"a reply to an 'instances' request needs 'predictions'; got keys "
                             f"{sorted(response)}")
        rows = response["predictions"]
        if rows and isinstance(rows[0], dict) and not (set(rows[0]) == {"b64"}):
            return {k: _to_array([row[k] for row in rows]) for k in rows[0]}
        return {single: _to_array(rows)}
    if "outputs" not in response:
        raise ValueError(f"a reply to an 'inputs' request needs 'outputs'; got keys "
                         f"{sorted(response)}")
    outputs = response["outputs"]
    if isinstance(outputs, dict) and not set(outputs) == {"b64"}:
        return {k: _to_array(v) for k, v in outputs.items()}
    return {single: _to_array(outputs)}


def rest_predict_url(server: str, model_name: str, version: int | None = None) -> str:
    """http://host:8501/v1/models/<name>[/versions/<v>]:predict"""
    base = server if server.startswith(("http://", "https://")) else f"http://{server}"
    path = f"/v1/models/{model_name}" + (f"/versions/{int(version)}" if version else "")
    return base.rstrip("/") + path + ":predict"


def rest_predict(server: str, model_name: str, inputs: Mapping[str, Any],
                 signature_name: str = "serving_default", version: int | None = None,
                 fmt: str = "instances", b64: bool = False, timeout: float = 30.0
                 ) -> dict[str, np.ndarray]:
    """POSTs a Predict request to TF Serving's REST port; returns {output name: array}."""
    body = json.dumps(rest_request_body(inputs, signature_name, fmt, b64)).encode("utf-8")
    request = urllib.request.Request(rest_predict_url(server, model_name, version), data=body,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            payload = json.loads(reply.read().decode("utf-8"))
    except urllib.error.HTTPError as e:  # The server puts {"error": ...} in the body.
        try:
            payload = json.loads(e.read().decode("utf-8"))
        except ValueError:
            raise ServingError(f"HTTP {e.code} from {request.full_url}") from e
    return parse_rest_response(payload, fmt)


def _serving_apis():
    try:
        from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc
    except ImportError as e:
        raise ImportError("the gRPC client needs the tensorflow-serving-api package "
                          "(pip install tensorflow-serving-api==<your TensorFlow version>); "
                          "use the REST client otherwise") from e
    return predict_pb2, prediction_service_pb2_grpc


def grpc_predict_request(model_name: str, inputs: Mapping[str, Any],
                         signature_name: str = "serving_default", version: int | None = None):
    """A `tensorflow.serving.PredictRequest` (needs tensorflow-serving-api).

    String inputs become DT_STRING tensors; lists of Python ints become int32 (what the id
    signatures take); numpy arrays keep their dtype.
    """
    import tensorflow as tf

    predict_pb2, _ = _serving_apis()
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    request.model_spec.signature_name = signature_name
    if version:
        request.model_spec.version.value = int(version)
    for name, value in inputs.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(_as_array(value)))
    return request


def _as_array(value: Any) -> np.ndarray:
    """Nested lists / arrays -> numpy; strings (str or bytes, mixed) -> an object array of bytes."""
    if isinstance(value, np.ndarray) and value.dtype.kind not in "OU":
        return value
    has_text = False

    def encode(v):
        nonlocal has_text
        if isinstance(v, str):
            has_text = True
            return v.encode("utf-8")
        if isinstance(v, bytes):
            has_text = True
            return v
        if isinstance(v, (list, tuple, np.ndarray)):
            return [encode(x) for x in v]
        return v

    encoded = encode(value.tolist() if isinstance(value, np.ndarray) else value)
    if has_text:
        return np.array(encoded, dtype=object)
    array = np.asarray(encoded)
    # Python ints (e.g. parsed JSON) default to int32: the id signatures take int32, and the
    # server does not convert a gRPC tensor's dtype. Pass a numpy array to choose another.
    return array.astype(np.int32) if array.dtype == np.int64 else array


def grpc_predict(server: str, model_name: str, inputs: Mapping[str, Any],
                 signature_name: str = "serving_default", version: int | None = None,
                 timeout: float = 30.0) -> dict[str, np.ndarray]:
    """Predict over gRPC (port 8500); returns {output name: array}."""
    import grpc
    import tensorflow as tf

    _, prediction_service_pb2_grpc = _serving_apis()
    request = grpc_predict_request(model_name, inputs, signature_name, version)
    with grpc.insecure_channel(server) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        try:
            reply = stub.Predict(request, timeout=timeout)
        except grpc.RpcError as e:
            raise ServingError(f"{e.code().name}: {e.details()}") from e
    return {k: tf.make_ndarray(v) for k, v in reply.outputs.items()}
