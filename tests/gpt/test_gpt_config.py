"""GptConfig: train.py's names, JSON both ways, one-line errors naming the field."""
from __future__ import annotations

import json

import pytest

from bert_tf.errors import UserInputError
from bert_tf.gpt.config import GptConfig, GptConfigError


def test_defaults_are_train_py_defaults():
    c = GptConfig()
    assert (c.n_vocab, c.n_special, c.n_ctx, c.n_embd, c.n_head, c.n_layer) == (
        40478, 3, 512, 768, 12, 12)
    assert (c.embd_pdrop, c.attn_pdrop, c.resid_pdrop, c.clf_pdrop, c.afn) == (
        0.1, 0.1, 0.1, 0.1, "gelu")
    assert c.table_rows == 40478 + 3 + 512 and c.first_position_id == 40481 and c.head_size == 64


def test_json_round_trip(tmp_path):
    c = GptConfig(n_vocab=100, n_special=2, n_ctx=16, n_embd=32, n_head=4, n_layer=2,
                  embd_pdrop=0.2, afn="swish")
    path = tmp_path / "gpt_config.json"
    c.to_json_file(path)
    assert GptConfig.from_json_file(path) == c
    assert json.loads(path.read_text())["afn"] == "swish"


@pytest.mark.parametrize("fields, message", [
    ({"n_embd": 30, "n_head": 4}, "'n_embd' (30) is not a multiple of 'n_head' (4)"),
    ({"afn": "tanh"}, "field 'afn' is 'tanh'"),
    ({"n_layer": 0}, "field 'n_layer' must be >= 1"),
    ({"n_ctx": 2.5}, "field 'n_ctx' must be an integer"),
    ({"clf_pdrop": 1.0}, "field 'clf_pdrop' must be in [0, 1)"),
    ({"n_vocab": True}, "field 'n_vocab' must be an integer"),
    ({"hidden_size": 8}, "unknown field(s) 'hidden_size'"),
])
def test_bad_fields_raise_one_line_user_errors(fields, message):
    with pytest.raises(GptConfigError) as info:
        GptConfig.from_dict(fields, source="cfg.json")
    assert isinstance(info.value, UserInputError)
    assert message in str(info.value) and str(info.value).startswith("cfg.json: ")
    assert "\n" not in str(info.value)


def test_file_errors_name_the_file(tmp_path):
    with pytest.raises(GptConfigError, match="cannot read GPT config file .*missing.json"):
        GptConfig.from_json_file(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{\"n_vocab\": 5,\n oops}")
    with pytest.raises(GptConfigError, match=r"bad.json: not valid JSON \(line 2"):
        GptConfig.from_json_file(bad)


def test_read_and_written_through_io_utils_like_bert_config():
    """One reader for both families (bert_tf.config_io): any file system TensorFlow has (here
    its in-memory ram://), and the same one-line error for JSON that is not an object."""
    import tensorflow as tf

    from bert_tf.modeling import BertConfig, ConfigError

    c = GptConfig(n_vocab=100, n_special=0, n_ctx=16, n_embd=32, n_head=4, n_layer=2)
    c.to_json_file("ram://gpt_config_test/gpt_config.json")
    assert GptConfig.from_json_file("ram://gpt_config_test/gpt_config.json") == c
    tf.io.gfile.rmtree("ram://gpt_config_test")
    for cls, error in ((GptConfig, GptConfigError), (BertConfig, ConfigError)):
        with pytest.raises(error, match=r"^cfg.json: expected a JSON object, got list$"):
            cls.from_dict([1, 2], source="cfg.json")
