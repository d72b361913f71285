"""Static check that a SavedModel is servable by stock TF Serving.

`check_serving_compatibility(export_dir)` reads `saved_model.pb` and verifies:
  * a MetaGraph tagged `serve`;
  * every op (graph and function library) is a TF core op or one of the tensorflow-text ops that
    TF Serving links (`@org_tensorflow_text//tensorflow_text:ops_lib`), and, for portability to
    older servers, only the *classic* tensorflow-text ops (no FastWordpiece/FastBert ops);
  * every signature output is a dense tensor (no ragged/sparse/composite encodings) and all
    outputs of a signature start with the same (batch) dimension (REST's row format needs it);
  * no function is XLA-compiled (`_XlaMustCompile` absent or false), and no op is one of
    tf2xla's `Xla*` ops (e.g. `XlaDynamicUpdateSlice`, what `keras.ops.slice_update` emits):
    outside a compiled cluster their kernels compile on demand with XLA:CPU, which stock TF
    Serving disables (`--xla_cpu_compilation_enabled` is off by default), so the request fails.
It also names the oldest TF Serving release whose op set covers the export.

Which ops are tensorflow-text's is read from the installed kernel libraries themselves
(`TF_GetOpList` of each library, as `tf.load_op_library` reads it); "core" means registered by TensorFlow and not by
tensorflow-text.
"""
from __future__ import annotations

import dataclasses
import functools
import os

import tensorflow as tf

# tensorflow-text kernel libraries (python/ops/_<name>.so) and the first TF Serving release whose
# ModelServer runs their ops. Sources: TF Serving's RELEASE.md for 2.0.0 lists
# constrained_sequence_op, sentence_breaking_ops, unicode_script_tokenizer, whitespace_tokenizer
# and wordpiece_tokenizer; the normalize ops were linked by 2.2.0 but failed at run time for
# want of ICU data ("Could not retrieve ICU NFKC_CaseFold normalizer", tensorflow/text#281,
# tensorflow/serving#1613), fixed by tensorflow/serving#1616 (May 2020), i.e. from 2.3.0. For
# other libraries no release is recorded here: they are reported as "unknown" (check against
# the server you run).
_TEXT_LIBRARY_SINCE = {
    "_constrained_sequence_op": "2.0.0",
    "_sentence_breaking_ops": "2.0.0",
    "_unicode_script_tokenizer": "2.0.0",
    "_whitespace_tokenizer": "2.0.0",
    "_wordpiece_tokenizer": "2.0.0",
    "_normalize_ops": "2.3.0",
}
# Members of tensorflow-text's `ops_lib` (tensorflow_text/BUILD) = the ops TF Serving links.
_SERVING_TEXT_LIBRARIES = frozenset({
    "_boise_offset_converter", "_byte_splitter", "_constrained_sequence_op",
    "_fast_bert_normalizer", "_fast_sentencepiece_tokenizer", "_fast_wordpiece_tokenizer",
    "_mst_ops", "_ngrams_op", "_normalize_ops", "_phrase_tokenizer", "_regex_split_ops",
    "_sentence_breaking_ops", "_sentencepiece_tokenizer", "_split_merge_from_logits_tokenizer",
    "_split_merge_tokenizer", "_state_based_sentence_breaker_op", "_text_similarity_metric_ops",
    "_trimmer_ops", "_unicode_script_tokenizer", "_utf8_binarize_op", "_whitespace_tokenizer",
    "_whitespace_tokenizer_v2", "_wordpiece_tokenizer",
})
# The classic BERT-tokenization ops this project's exports may use.
CLASSIC_TEXT_OPS = frozenset({"NormalizeUTF8", "WordpieceTokenizeWithOffsets",
                              "CaseFoldUTF8", "RegexSplitWithOffsets"})
# Core ops that SavedModels written by recent TF contain and older servers lack (first TF
# release registering them, from TF's op registration history). The save/restore functions of
# every TF >= 2.13 SavedModel use DisableCopyOnRead.
_CORE_OP_SINCE = {"DisableCopyOnRead": "2.13.0"}
_BASELINE_RELEASE = "2.0.0"  # TF Serving 2.x: the range this check speaks about.


@functools.lru_cache(maxsize=None)
def tensorflow_text_ops() -> dict[str, str]:
    """Op name -> kernel library name (e.g. "_wordpiece_tokenizer") for every tensorflow-text op."""
    from bert_tf.export.loader_harness import tensorflow_text_op_libraries

    import tensorflow_text  # noqa: F401  (registers the ops; load_op_library then reports them)

    from tensorflow.core.framework import op_def_pb2
    from tensorflow.python.client import pywrap_tf_session

    ops: dict[str, str] = {}
    for path in tensorflow_text_op_libraries():
        library = os.path.splitext(os.path.basename(path))[0]
        # What tf.load_op_library does to find a library's ops (TF_GetOpList of the C API).
        handle = pywrap_tf_session.TF_LoadLibrary(path)
        op_list = op_def_pb2.OpList.FromString(pywrap_tf_session.TF_GetOpList(handle))
        for op in op_list.op:
            ops[op.name] = library
    return ops


def _version_key(version: str) -> tuple:
    return tuple(int(x) for x in version.split(".") if x.isdigit())


@dataclasses.dataclass
class ServingCompatibilityReport:
    """What `check_serving_compatibility` found; `problems` is empty for a servable export."""

    export_dir: str
    tags: list[list[str]]
    signatures: dict[str, dict[str, list[str]]]  # name -> {"inputs": [...], "outputs": [...]}
    core_ops: list[str]
    text_ops: dict[str, str]  # op -> library
    oldest_serving_release: str
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def savedmodel_ops(meta_graph) -> set[str]:
    """Every op type in a MetaGraphDef: graph nodes and all library functions."""
    ops = {node.op for node in meta_graph.graph_def.node}
    for fn in meta_graph.graph_def.library.function:
        ops.update(node.op for node in fn.node_def)
    # Calls to library functions appear as ops named after the function.
    ops -= {fn.signature.name for fn in meta_graph.graph_def.library.function}
    return ops


def _xla_compiled(meta_graph) -> list[str]:
    found = []
    for fn in meta_graph.graph_def.library.function:
        attr = fn.attr.get("_XlaMustCompile")
        if attr is not None and attr.b:
            found.append(fn.signature.name)
        for node in fn.node_def:
            a = node.attr.get("_XlaMustCompile")
            if a is not None and a.b:
                found.append(f"{fn.signature.name}/{node.name}")
    for node in meta_graph.graph_def.node:
        a = node.attr.get("_XlaMustCompile")
        if a is not None and a.b:
            found.append(node.name)
    return found


def check_serving_compatibility(export_dir: str | os.PathLike, allow_fast_text_ops: bool = False
                                ) -> ServingCompatibilityReport:
    """Checks one SavedModel version folder (see the module docstring).

    Args:
      export_dir: the folder holding saved_model.pb.
      allow_fast_text_ops: accept tensorflow-text ops beyond the classic set (still only those
        TF Serving links).

    Returns:
      A `ServingCompatibilityReport` (`.ok`, `.problems`).
    """
    from tensorflow.core.protobuf import saved_model_pb2
    from tensorflow.python.framework import op_def_registry

    export_dir = os.fspath(export_dir)
    path = os.path.join(export_dir, "saved_model.pb")
    sm = saved_model_pb2.SavedModel()
    from bert_tf import io_utils  # exports on gs:// / ram:// too

    with io_utils.open_file(path, "rb") as f:
        sm.ParseFromString(f.read())
    problems: list[str] = []
    tags = [list(mg.meta_info_def.tags) for mg in sm.meta_graphs]
    serve = [mg for mg in sm.meta_graphs if "serve" in mg.meta_info_def.tags]
    if not serve:
        problems.append(f"{path}: no MetaGraph is tagged 'serve' (tags: {tags})")
        return ServingCompatibilityReport(export_dir, tags, {}, [], {}, "", problems)
    meta_graph = serve[0]
    text_ops = tensorflow_text_ops()
    used = savedmodel_ops(meta_graph)
    core, text = [], {}
    for op in sorted(used):
        if op in text_ops:
            library = text_ops[op]
            text[op] = library
            if library not in _SERVING_TEXT_LIBRARIES:
                problems.append(f"op {op} ({library}) is not in TF Serving's tensorflow-text ops")
            elif op not in CLASSIC_TEXT_OPS and not allow_fast_text_ops:
                problems.append(f"op {op} ({library}) is not one of the classic tensorflow-text "
                                f"ops {sorted(CLASSIC_TEXT_OPS)} (older servers lack it)")
        elif op_def_registry.get(op) is not None:
            core.append(op)
            if op.startswith("Xla"):
                problems.append(f"op {op} runs only through XLA's on-demand compiler, which TF "
                                "Serving disables by default; build the graph from core ops")
        else:
            problems.append(f"op {op} is neither a TF core op nor a tensorflow-text op")
    signatures = {}
    for name, sig in meta_graph.signature_def.items():
        signatures[name] = {"inputs": sorted(sig.inputs), "outputs": sorted(sig.outputs)}
        for key, info in list(sig.inputs.items()) + list(sig.outputs.items()):
            if info.WhichOneof("encoding") != "name":
                problems.append(f"signature {name}: {key} is a {info.WhichOneof('encoding')} "
                                "tensor; TF Serving needs dense tensors")
        if name != "__saved_model_init_op":
            first = {k: (None if v.tensor_shape.unknown_rank or not v.tensor_shape.dim
                         else v.tensor_shape.dim[0].size) for k, v in sig.outputs.items()}
            if len(set(first.values())) > 1 or None in first.values():
                problems.append(f"signature {name}: outputs do not all start with the same "
                                f"(batch) dimension {first}; REST's row format ('instances') "
                                "needs that")
    for fn in _xla_compiled(meta_graph):
        problems.append(f"function {fn} is XLA-compiled (_XlaMustCompile=true)")
    releases = [_BASELINE_RELEASE]
    for op, library in text.items():
        releases.append(_TEXT_LIBRARY_SINCE.get(library, "unknown"))
    releases += [_CORE_OP_SINCE[op] for op in core if op in _CORE_OP_SINCE]
    oldest = "unknown" if "unknown" in releases else max(releases, key=_version_key)
    return ServingCompatibilityReport(export_dir, tags, signatures, core, text, oldest, problems)


def assert_servable(export_dir: str | os.PathLike) -> ServingCompatibilityReport:
    """`check_serving_compatibility`, raising ValueError listing the problems if any."""
    report = check_serving_compatibility(export_dir)
    if not report.ok:
        raise ValueError(f"{os.fspath(export_dir)} is not servable by TF Serving:\n  " +
                         "\n  ".join(report.problems))
    return report
