"""BertConfig reads and writes the original bert_config.json and rejects bad fields by name."""
import json

import pytest

from bert_tf.modeling import BertConfig, ConfigError


def test_round_trip_original_file(original_fixtures, tmp_path):
    path = original_fixtures / "checkpoint" / "bert_config.json"
    config = BertConfig.from_json_file(path)
    assert config.hidden_size == 128 and config.num_hidden_layers == 2
    assert config.hidden_act == "gelu" and config.type_vocab_size == 2
    out = tmp_path / "bert_config.json"
    config.to_json_file(out)
    assert json.loads(out.read_text()) == json.loads(path.read_text())


def _write(tmp_path, **fields):
    base = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=64)
    base.update(fields)
    p = tmp_path / "bert_config.json"
    p.write_text(json.dumps(base))
    return p


@pytest.mark.parametrize("fields, words", [
    (dict(hidden_size=30), ["hidden_size", "num_attention_heads", "multiple"]),
    (dict(num_hidden_layers="12"), ["num_hidden_layers", "integer"]),
    (dict(hidden_dropout_prob="0.1"), ["hidden_dropout_prob", "number"]),
    (dict(hidden_dropout_prob=1.5), ["hidden_dropout_prob"]),
    (dict(hidden_act="gelu_fancy"), ["hidden_act", "gelu_fancy"]),
    (dict(vocab_size=0), ["vocab_size", "positive"]),
    (dict(hidden_sise=32), ["hidden_sise", "unknown"]),
])
def test_bad_field_is_named(tmp_path, fields, words):
    path = _write(tmp_path, **fields)
    with pytest.raises(ConfigError) as e:
        BertConfig.from_json_file(path)
    for w in words:
        assert w in str(e.value)
    assert str(path) in str(e.value)


def test_bad_json_and_missing_file(tmp_path):
    p = tmp_path / "c.json"
    p.write_text("{\"vocab_size\": 10,\n oops}")
    with pytest.raises(ConfigError, match=r"c.json: not valid JSON \(line 2"):
        BertConfig.from_json_file(p)
    with pytest.raises(ConfigError, match="cannot read BERT config file"):
        BertConfig.from_json_file(tmp_path / "absent.json")


def test_direct_construction_validates():
    with pytest.raises(ConfigError, match="hidden_size"):
        BertConfig(vocab_size=10, hidden_size=10, num_attention_heads=3)
