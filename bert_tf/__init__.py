"""bert_tf: BERT (Devlin et al., 2018) in TensorFlow 2 / Keras 3, faithful to google-research/bert.

    import bert_tf
    model, tokenizer = bert_tf.from_pretrained("path/to/uncased_L-12_H-768_A-12")

Subpackages:
  modeling           BertConfig, layers (embeddings, attention, transformer block), the encoder,
                     heads, the pretraining and fine-tuning models (all `.keras`-serializable).
  tokenization       FullTokenizer & co (the original's API), the in-graph tokenizer, vocab building.
  checkpoints        original TF1 variable names <-> Keras variables; Hugging Face safetensors.
  pretraining_data   pretraining-data generation and the TFRecord reader.
  evaluation         official metrics (GLUE, SQuAD v1.1/v2.0, conlleval).

Top-level names (imported on first use, so `import bert_tf` does not import TensorFlow):
  from_pretrained    a model and its tokenizer from Google's release folder, a Hugging Face
                     folder, a bert_tf `.keras` file or encoder SavedModel, or a preset name.
  list_presets       the preset names (the published configs of official_configs/models/).
"""

__version__ = "0.1.0"

from bert_tf import moved_modules as _moved_modules  # old module paths still import (CHANGELOG)

_moved_modules.install()

__all__ = ["from_pretrained", "list_presets"]

_LAZY = {"from_pretrained": ("bert_tf.pretrained", "from_pretrained"),
         "list_presets": ("bert_tf.presets", "list_presets")}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attribute = _LAZY[name]
        value = getattr(importlib.import_module(module), attribute)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'bert_tf' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_LAZY))
