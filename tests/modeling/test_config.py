"""BertConfig reads and writes the original bert_config.json and rejects bad fields by name; a
near miss of a field name (`num_hidden_layer`) is an error suggesting the field, other unknown
keys are kept with a warning."""
import json
import warnings

import pytest

from bert_tf.modeling import BertConfig, ConfigError
from bert_tf.modeling.config import NEAR_MISS_RATIO, PUBLISHED_EXTRA_FIELDS, nearest_field
from bert_tf.modeling.serialization import bert_config_from_saved

FIELDS = BertConfig.model_field_names()


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
    directionality); a key that is no near miss of a field is kept, written back and warned
    about."""
    path = _write(tmp_path, my_note="trained on wiki", pooler_type="first_token_transform")
    with pytest.warns(UserWarning, match=r"bert_config.json: keeping field\(s\).*my_note, "
                                         r"pooler_type"):
        config = BertConfig.from_json_file(path)
    assert config.hidden_size == 32
    assert config.extra_fields == {"my_note": "trained on wiki",
                                   "pooler_type": "first_token_transform"}
    out = tmp_path / "out.json"
    config.to_json_file(out)
    written, given = json.loads(out.read_text()), json.loads(path.read_text())
    assert {k: written[k] for k in given} == given  # (plus the defaults of absent fields)
    assert BertConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ConfigError, match="repeat model field"):
        BertConfig(vocab_size=10, extra_fields={"hidden_size": 3})


@pytest.mark.parametrize("key, field, effect", [
    ("num_hidden_layer", "num_hidden_layers", "num_hidden_layers left at its default 12"),
    ("hidden_sise", "hidden_size", "hidden_size left at its default 768"),
    ("initializer_rnage", "initializer_range", "initializer_range left at its default 0.02"),
    ("Hidden_Dropout_Prob", "hidden_dropout_prob", "its default 0.1"),
    ("type-vocab-size", "type_vocab_size", "its default 16"),
    ("num_attention_heads_", "num_attention_heads", "its default 12"),
])
def test_near_miss_of_a_field_is_an_error_naming_the_field(tmp_path, key, field, effect):
    """Before: a warning, then the default was built (12 layers for `num_hidden_layer`, and only
    a checkpoint mismatch showed it; a harmless-looking default not even that)."""
    base = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=64, initializer_range=0.02)
    base.pop(field, None)
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps({**base, key: 3}))
    with pytest.raises(ConfigError) as e:
        BertConfig.from_json_file(path)
    message = str(e.value)
    assert message.startswith(f"{path}: unknown field {key!r} — did you mean {field!r}?")
    assert effect in message and "\n" not in message


def test_near_miss_with_the_field_also_given_and_vocab_size(tmp_path):
    with pytest.raises(ConfigError, match=r"'num_hidden_layer' — did you mean "
                                          r"'num_hidden_layers'\?; 'num_hidden_layers' is given "
                                          r"too: remove the misspelt key"):
        BertConfig.from_dict({"vocab_size": 10, "num_hidden_layers": 2, "num_hidden_layer": 3})
    with pytest.raises(ConfigError, match=r"c.json: unknown field 'vocab_sizes' — did you mean "
                                          r"'vocab_size'\?$"):
        BertConfig.from_dict({"vocab_sizes": 10}, source="c.json")


def _one_slips(name: str) -> set[str]:
    """Every one-character slip of `name`: a letter deleted or doubled, and (a sample of the
    alphabet, to stay quick) replaced or inserted."""
    letters = "aeisx_"
    out = set()
    for i in range(len(name) + 1):
        if i < len(name):
            out.add(name[:i] + name[i + 1:])
            out.add(name[:i] + name[i] + name[i:])
            out.update(name[:i] + c + name[i + 1:] for c in letters)
        out.update(name[:i] + c + name[i:] for c in letters)
    return out - {name}


def test_near_miss_rule():
    """NEAR_MISS_RATIO (difflib ratio 0.85): every one-character slip of every field is a near
    miss of that field; Google's published extra keys and common keys of other configs are not
    (they stay warnings)."""
    assert NEAR_MISS_RATIO == 0.85
    for field in FIELDS:
        slips = _one_slips(field)
        misses = {k: nearest_field(k, FIELDS) for k in slips}
        # A slip can land nearer another field only if it is one (none is).
        assert all(misses[k] == field for k in slips), (field, {
            k: v for k, v in misses.items() if v != field})
    assert nearest_field("hidden_sise", FIELDS) == "hidden_size"
    assert nearest_field("HIDDEN_SIZE", FIELDS) == "hidden_size"
    assert nearest_field("hiddenSize", FIELDS) == "hidden_size"
    assert nearest_field("hidden_size", FIELDS) is None  # a field is no near miss of itself
    for key in (*PUBLISHED_EXTRA_FIELDS, "position_embedding_type", "layer_norm_eps",
                "vocab_file", "hidden_dropout", "num_layers", "type_vocab", "model_type",
                "pad_token_id", "architectures", "torch_dtype", "transformers_version",
                "classifier_dropout", "max_seq_length", "num_labels", "my_note"):
        assert nearest_field(key, FIELDS) is None, key


def test_published_extra_fields_load_as_before():
    """`pooler_num_attention_heads` is 0.84 from `num_attention_heads`: listed, never a typo."""
    config = dict(vocab_size=100, directionality="bidi", pooler_fc_size=768,
                  pooler_num_attention_heads=12, pooler_num_fc_layers=3, pooler_size_per_head=128,
                  pooler_type="first_token_transform")
    with pytest.warns(UserWarning, match="pooler_num_attention_heads"):
        loaded = BertConfig.from_dict(config)
    assert loaded.num_attention_heads == 12 and loaded.extra_fields["pooler_fc_size"] == 768


def test_not_strict_warns_with_the_hint_for_saved_models():
    """A config saved inside a .keras file before near misses became errors: its weights were
    built from the defaults, so it loads (with the hint in the warning when read directly)."""
    saved = {"vocab_size": 10, "hidden_size": 8, "num_attention_heads": 2, "intermediate_size": 16,
             "num_hidden_layer": 3}
    with pytest.warns(UserWarning, match=r"'num_hidden_layer' looks like 'num_hidden_layers'"):
        config = BertConfig.from_dict(saved, strict=False)
    assert config.num_hidden_layers == 12 and config.extra_fields == {"num_hidden_layer": 3}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert bert_config_from_saved(saved) == config


def test_heads_not_dividing_hidden_size_is_refused_at_construction():
    """bert_tf's own BertConfig checks at construction (the original's only fails when the model
    is built; bert_tf.original.modeling.BertConfig keeps that, tests/original)."""
    with pytest.raises(ConfigError, match=r"'hidden_size' \(37\) is not a multiple of "
                                          r"'num_attention_heads' \(12\)"):
        BertConfig(vocab_size=99, hidden_size=37)


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
