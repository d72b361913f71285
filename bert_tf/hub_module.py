"""`--bert_hub_module_handle`: a BERT encoder SavedModel as the start of fine-tuning, with its own
tokenizer, as the original's `run_classifier_with_tfhub.py` (which asked the hub module's
`tokenization_info` signature for `vocab_file` and `do_lower_case`).

  module = resolve_hub_module("/path/to/encoder_export")   # or a TF Hub handle (network)
  module.path, module.config, module.vocab_file, module.do_lower_case

The module is a bert_tf encoder export (`bert_tf.export.export_encoder_savedmodel(...,
vocab_file=...)` or `tools/export_savedmodel.py --model_type=encoder --vocab_file=...`): it holds
`bert_config_json`, the weights, and, like TF Hub's BERT encoders, the vocab as an asset
(`vocab_file`) and a `do_lower_case` variable. A handle that is not a local folder is resolved
with `tensorflow_hub.resolve` (downloads into TF Hub's cache; needs network). TF Hub's own BERT
encoders (TF Model Garden layout, no `bert_config_json`) are reported as such: their weights are
not mapped onto bert_tf's encoder.
"""
from __future__ import annotations

import dataclasses
import json
import os

from bert_tf import io_utils
from bert_tf.errors import UserInputError


class HubModuleError(UserInputError):
    """A --bert_hub_module_handle that cannot be used (missing, not an encoder export, no vocab)."""


@dataclasses.dataclass(frozen=True)
class HubModule:
    """A resolved encoder module.

    Attributes:
      path: local SavedModel folder (usable as `--init_checkpoint`).
      config: its `BertConfig`.
      vocab_file: path of its vocab asset.
      do_lower_case: its casing.
    """

    path: str
    config: object
    vocab_file: str
    do_lower_case: bool


def _local_path(handle: str) -> str:
    if io_utils.isdir(handle):
        return handle
    if handle.startswith(("http://", "https://")) or not io_utils.exists(handle):
        try:
            import tensorflow_hub as hub
        except ImportError as e:
            raise HubModuleError(f"--bert_hub_module_handle={handle}: not a local folder, and "
                                 "tensorflow-hub (to resolve TF Hub handles) is not installed"
                                 ) from e
        try:
            return hub.resolve(handle)
        except Exception as e:  # network, unknown handle
            raise HubModuleError(f"--bert_hub_module_handle={handle}: cannot resolve it "
                                 f"({type(e).__name__}: {' '.join(str(e).split())[:200]})") from e
    raise HubModuleError(f"--bert_hub_module_handle={handle} is a file; expected a SavedModel "
                         "folder or a TF Hub handle")


def resolve_hub_module(handle: str) -> HubModule:
    """Loads the module's metadata: its config, vocab asset and casing.

    Raises HubModuleError naming --bert_hub_module_handle and what is missing."""
    import tensorflow as tf

    from bert_tf.modeling import BertConfig

    io_utils.check_path(handle, "--bert_hub_module_handle")
    path = _local_path(handle)
    if not (io_utils.exists(io_utils.join(path, "saved_model.pb"))
            or io_utils.exists(io_utils.join(path, "saved_model.pbtxt"))):
        raise HubModuleError(f"--bert_hub_module_handle={handle}: {path} holds no SavedModel "
                             "(saved_model.pb)")
    try:
        loaded = tf.saved_model.load(path)
    except (OSError, ValueError, tf.errors.OpError) as e:
        raise HubModuleError(f"--bert_hub_module_handle={handle}: cannot load the SavedModel "
                             f"({type(e).__name__}: {' '.join(str(e).split())[:200]})") from e
    if not hasattr(loaded, "bert_config_json"):
        raise HubModuleError(
            f"--bert_hub_module_handle={handle}: not a bert_tf encoder export (no "
            "bert_config_json); TF Hub's Model Garden BERT encoders are not mapped onto bert_tf's "
            "encoder: convert the release's checkpoint instead (--init_checkpoint)")
    if not hasattr(loaded, "vocab_file"):
        raise HubModuleError(
            f"--bert_hub_module_handle={handle}: the module carries no vocab_file asset; export "
            "it with --vocab_file (tools/export_savedmodel.py --model_type=encoder) or pass "
            "--init_checkpoint, --vocab_file and --do_lower_case instead")
    config = BertConfig.from_dict(json.loads(loaded.bert_config_json.numpy().decode("utf-8")),
                                  source=os.path.join(path, "(bert_config_json)"))
    vocab_file = loaded.vocab_file.asset_path.numpy().decode("utf-8")
    do_lower_case = bool(loaded.do_lower_case.numpy()) if hasattr(loaded, "do_lower_case") \
        else True
    return HubModule(path=path, config=config, vocab_file=vocab_file,
                     do_lower_case=do_lower_case)


__all__ = ["HubModule", "HubModuleError", "resolve_hub_module"]
