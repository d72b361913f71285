"""Hugging Face BERT weights (`model.safetensors` + `config.json`) -> original TF1 names.

Hugging Face's PyTorch `BertModel` stores linear weights as [out, in]; TF kernels are [in, out],
so kernels are transposed. Names may carry a `bert.` prefix (BertForPreTraining & co.), and old
checkpoints use `gamma`/`beta` instead of `weight`/`bias` for LayerNorm.
"""
from __future__ import annotations

import json
import os
import re

import numpy as np

from bert_tf.modeling.config import BertConfig, ConfigError

# Hugging Face "hidden_act" -> ours ("gelu" in HF is the exact erf form; ours is the tanh form).
_HF_ACTIVATIONS = {"gelu": "gelu_exact", "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu",
                   "gelu_fast": "gelu", "relu": "relu", "tanh": "tanh", "silu": "silu",
                   "swish": "swish", "linear": "linear"}

_LAYER_PARTS = {
    "attention.self.query": "attention/self/query",
    "attention.self.key": "attention/self/key",
    "attention.self.value": "attention/self/value",
    "attention.output.dense": "attention/output/dense",
    "attention.output.LayerNorm": "attention/output/LayerNorm",
    "intermediate.dense": "intermediate/dense",
    "output.dense": "output/dense",
    "output.LayerNorm": "output/LayerNorm",
}
_OTHER = {
    "embeddings.word_embeddings.weight": "bert/embeddings/word_embeddings",
    "embeddings.position_embeddings.weight": "bert/embeddings/position_embeddings",
    "embeddings.token_type_embeddings.weight": "bert/embeddings/token_type_embeddings",
    "embeddings.LayerNorm": "bert/embeddings/LayerNorm",
    "pooler.dense": "bert/pooler/dense",
    "cls.predictions.transform.dense": "cls/predictions/transform/dense",
    "cls.predictions.transform.LayerNorm": "cls/predictions/transform/LayerNorm",
    "cls.predictions.bias": "cls/predictions/output_bias",
    "cls.seq_relationship.weight": "cls/seq_relationship/output_weights",
    "cls.seq_relationship.bias": "cls/seq_relationship/output_bias",
}
# Buffers and tied copies that have no variable of their own in the original.
_IGNORED = re.compile(r"(position_ids|cls\.predictions\.decoder\.(weight|bias))$")


def config_from_huggingface(hf_config: dict, source: str = "config.json") -> BertConfig:
    """Maps a Hugging Face `BertConfig` dict to ours (activation names translated)."""
    act = hf_config.get("hidden_act", "gelu")
    if act not in _HF_ACTIVATIONS:
        raise ConfigError(f"{source}: hidden_act {act!r} has no equivalent here")
    eps = hf_config.get("layer_norm_eps", 1e-12)
    if abs(eps - 1e-12) > 1e-15:
        raise ConfigError(f"{source}: layer_norm_eps is {eps}; BERT (and this implementation) "
                          "uses 1e-12")
    if hf_config.get("position_embedding_type", "absolute") != "absolute":
        raise ConfigError(f"{source}: position_embedding_type "
                          f"{hf_config['position_embedding_type']!r} is not BERT's 'absolute'")
    fields = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
              "intermediate_size", "hidden_dropout_prob", "attention_probs_dropout_prob",
              "max_position_embeddings", "type_vocab_size", "initializer_range")
    values = {k: hf_config[k] for k in fields if k in hf_config}
    values["hidden_act"] = _HF_ACTIVATIONS[act]
    return BertConfig.from_dict(values, source=source)


def _tf1_name(hf_name: str) -> tuple[str, bool] | None:
    """HF tensor name -> (original variable name, needs transpose); None if not a BERT weight."""
    name = hf_name
    for p in ("bert.", "model."):
        if name.startswith(p):
            name = name[len(p):]
    name = name.replace(".gamma", ".weight").replace(".beta", ".bias")
    m = re.match(r"encoder\.layer\.(\d+)\.(.+)\.(weight|bias)$", name)
    if m:
        layer, part, kind = m.groups()
        if part not in _LAYER_PARTS:
            return None
        base = f"bert/encoder/layer_{layer}/{_LAYER_PARTS[part]}"
    else:
        for hf, tf1 in _OTHER.items():
            if name == hf:
                return tf1, False
        m = re.match(r"(.+)\.(weight|bias)$", name)
        if not m or m.group(1) not in _OTHER:
            return None
        base, kind = _OTHER[m.group(1)], m.group(2)
    if base.endswith("LayerNorm"):
        return f"{base}/{'gamma' if kind == 'weight' else 'beta'}", False
    return f"{base}/{'kernel' if kind == 'weight' else 'bias'}", kind == "weight"


def read_huggingface_weights(safetensors_file: str | os.PathLike) -> dict[str, np.ndarray]:
    """Reads a Hugging Face BERT `.safetensors` file as {original TF1 name: float32 array}.

    Raises ValueError naming the file and tensor for a tensor that is not a BERT weight.
    """
    from safetensors.numpy import load_file  # the well-kept reader for the format

    path = os.fspath(safetensors_file)
    try:
        tensors = load_file(path)
    except (OSError, Exception) as e:  # safetensors raises its own error type for bad headers
        raise ValueError(f"cannot read safetensors file {path}: {e}") from e
    out: dict[str, np.ndarray] = {}
    for hf_name, value in tensors.items():
        if _IGNORED.search(hf_name):
            continue
        mapped = _tf1_name(hf_name)
        if mapped is None:
            raise ValueError(f"{path}: tensor '{hf_name}' is not a weight of a BERT model")
        name, transpose = mapped
        array = np.asarray(value, dtype=np.float32)
        out[name] = np.ascontiguousarray(array.T) if transpose else array
    return out


def convert_huggingface_to_original(model_dir_or_file: str | os.PathLike, output_prefix: str,
                                    overwrite: bool = False) -> tuple[str, BertConfig]:
    """Converts Hugging Face BERT weights to an original-format checkpoint + `bert_config.json`.

    Args:
      model_dir_or_file: a folder with `model.safetensors` and `config.json` (and optionally
        `vocab.txt`, copied too), or the `.safetensors` file itself (config.json beside it).
      output_prefix: checkpoint prefix to write, e.g. `out/bert_model.ckpt`; `bert_config.json`
        (and `vocab.txt`) go to the same folder.

    Returns (checkpoint prefix, BertConfig).
    """
    from bert_tf.checkpoints.original import write_tf1_checkpoint
    from bert_tf.io_utils import atomic_output_path

    src = os.fspath(model_dir_or_file)
    folder = src if os.path.isdir(src) else os.path.dirname(src)
    st_file = os.path.join(src, "model.safetensors") if os.path.isdir(src) else src
    config_file = os.path.join(folder, "config.json")
    try:
        with open(config_file, encoding="utf-8") as f:
            hf_config = json.load(f)
    except OSError as e:
        raise ConfigError(f"cannot read Hugging Face config {config_file}: {e.strerror}") from e
    config = config_from_huggingface(hf_config, source=config_file)
    weights = read_huggingface_weights(st_file)
    _check_against_config(weights, config, st_file)
    out_dir = os.path.dirname(os.path.abspath(output_prefix))
    write_tf1_checkpoint(weights, output_prefix, overwrite=overwrite)
    config.to_json_file(os.path.join(out_dir, "bert_config.json"))
    vocab = os.path.join(folder, "vocab.txt")
    if os.path.exists(vocab):
        with atomic_output_path(os.path.join(out_dir, "vocab.txt")) as tmp:
            with open(vocab, "rb") as fin, open(tmp, "wb") as fout:
                fout.write(fin.read())
    return output_prefix, config


def _check_against_config(weights: dict[str, np.ndarray], config: BertConfig, source: str) -> None:
    expected = {
        "bert/embeddings/word_embeddings": (config.vocab_size, config.hidden_size),
        "bert/embeddings/position_embeddings": (config.max_position_embeddings, config.hidden_size),
        "bert/embeddings/token_type_embeddings": (config.type_vocab_size, config.hidden_size),
        "bert/encoder/layer_0/intermediate/dense/kernel": (config.hidden_size,
                                                           config.intermediate_size),
    }
    for name, shape in expected.items():
        if name not in weights:
            raise ValueError(f"{source}: no tensor for '{name}'")
        if weights[name].shape != shape:
            raise ValueError(f"{source}: '{name}' has shape {weights[name].shape}, config.json "
                             f"implies {shape}")
    last = config.num_hidden_layers - 1
    if f"bert/encoder/layer_{last}/output/dense/kernel" not in weights or \
            f"bert/encoder/layer_{last + 1}/output/dense/kernel" in weights:
        raise ValueError(f"{source}: number of layers does not match num_hidden_layers="
                         f"{config.num_hidden_layers}")
