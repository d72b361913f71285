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


def test_unknown_fields_are_kept_written_back_and_warned_about(tmp_path):
    """The original accepts any extra key (the Chinese/multilingual configs carry pooler_* and
    directionality); a typo is therefore a warning naming it, not an error."""
    path = _write(tmp_path, hidden_sise=32, pooler_type="first_token_transform")
    with pytest.warns(UserWarning, match=r"bert_config.json: keeping field\(s\).*hidden_sise, "
                                         r"pooler_type"):
        config = BertConfig.from_json_file(path)
    assert config.hidden_size == 32
    assert config.extra_fields == {"hidden_sise": 32, "pooler_type": "first_token_transform"}
    out = tmp_path / "out.json"
    config.to_json_file(out)
    written, given = json.loads(out.read_text()), json.loads(path.read_text())
    assert {k: written[k] for k in given} == given  # (plus the defaults of absent fields)
    assert BertConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ConfigError, match="repeat model field"):
        BertConfig(vocab_size=10, extra_fields={"hidden_size": 3})


def test_chinese_config_builds_a_model():
    """The published chinese_L-12_H-768_A-12 config (official_configs/models/) with its extra
    keys, at a small depth so that the build is quick: a model of its vocabulary runs."""
    import pathlib
    import warnings

    import numpy as np

    from bert_tf.modeling import BertClassifier

    path = (pathlib.Path(__file__).resolve().parents[2] / "official_configs" / "models"
            / "chinese_L-12_H-768_A-12.json")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        published = BertConfig.from_json_file(path)
    assert published.vocab_size == 21128 and published.extra_fields["pooler_num_fc_layers"] == 3
    small = BertConfig.from_dict({**published.to_dict(), "num_hidden_layers": 1,
                                  "hidden_size": 64, "num_attention_heads": 2,
                                  "intermediate_size": 128})
    assert small.extra_fields == published.extra_fields
    model = BertClassifier(small, num_labels=3).build_from_config_shapes()
    assert model.encoder.word_embeddings.shape == (21128, 64)
    ids = np.array([[101, 2769, 4263, 872, 102]], np.int32)  # [CLS] 我 爱 你 [SEP]
    logits = model({"input_word_ids": ids}, training=False)["logits"]
    assert logits.shape == (1, 3) and np.all(np.isfinite(logits))
