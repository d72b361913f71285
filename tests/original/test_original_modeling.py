"""`bert_tf.original.modeling`: the original's `BertModel` in a tf.compat.v1 session, on the
original release's own checkpoint and outputs (../shared/fixtures/original/checkpoint, README §4,
§7: 1e-5), loaded as `run_pretraining.py` loads it (`get_assignment_map_from_checkpoint` +
`tf.compat.v1.train.init_from_checkpoint`); its variable names; the original's config semantics.

Each test builds its own `tf.Graph` (TF2 behaviour stays on for the rest of the suite).
"""
import json

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.original import modeling

ATOL = 1e-5


def _fixture_inputs(ckpt):
    inputs = json.loads((ckpt / "inputs.json").read_text())
    return {k: np.asarray(inputs[k], np.int32) for k in ("input_ids", "input_mask", "segment_ids")}


def _run_fixture_model(ckpt, use_one_hot_embeddings=False):
    config = modeling.BertConfig.from_json_file(ckpt / "bert_config.json")
    feeds = _fixture_inputs(ckpt)
    graph = tf.Graph()
    with graph.as_default():
        model = modeling.BertModel(
            config=config, is_training=False,
            input_ids=tf.constant(feeds["input_ids"]),
            input_mask=tf.constant(feeds["input_mask"]),
            token_type_ids=tf.constant(feeds["segment_ids"]),
            use_one_hot_embeddings=use_one_hot_embeddings)
        tvars = tf.compat.v1.trainable_variables()
        assignment_map, initialized = modeling.get_assignment_map_from_checkpoint(
            tvars, str(ckpt / "bert_model.ckpt"))
        tf.compat.v1.train.init_from_checkpoint(str(ckpt / "bert_model.ckpt"), assignment_map)
        fetches = {
            "embedding_output": model.get_embedding_output(),
            "all_encoder_layers": model.get_all_encoder_layers(),
            "sequence_output": model.get_sequence_output(),
            "pooled_output": model.get_pooled_output(),
            "attention_probs": [graph.get_tensor_by_name(
                f"bert/encoder/layer_{i}/attention/self/Softmax:0")
                for i in range(config.num_hidden_layers)],
        }
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            out = sess.run(fetches)
        names = {v.name: v.shape.as_list() for v in tvars}
    return out, names, assignment_map, initialized, model


@pytest.fixture(scope="module")
def fixture_run(original_fixtures):
    ckpt = original_fixtures / "checkpoint"
    return ckpt, _run_fixture_model(ckpt), dict(np.load(ckpt / "reference_outputs.npz"))


def test_bert_model_in_a_session_gives_the_original_outputs(fixture_run):
    _, (out, _, _, _, _), ref = fixture_run
    np.testing.assert_allclose(out["embedding_output"], ref["embedding_output"], atol=ATOL, rtol=0)
    np.testing.assert_allclose(np.stack(out["all_encoder_layers"]), ref["all_encoder_layers"],
                               atol=ATOL, rtol=0)
    np.testing.assert_allclose(out["sequence_output"], ref["sequence_output"], atol=ATOL, rtol=0)
    np.testing.assert_allclose(out["pooled_output"], ref["pooled_output"], atol=ATOL, rtol=0)
    np.testing.assert_allclose(np.stack(out["attention_probs"]), ref["debug_attention_probs"],
                               atol=ATOL, rtol=0)


def test_variable_names_are_the_original_checkpoints(fixture_run):
    """Every `bert/*` variable of the original's checkpoint, same shape, nothing else; all of them
    matched by get_assignment_map_from_checkpoint (with and without ':0')."""
    ckpt, (_, names, assignment_map, initialized, _), _ = fixture_run
    expected = {}
    for line in (ckpt / "variables.txt").read_text().splitlines():
        name, shape, _ = line.split("\t")
        if name.startswith("bert/"):
            expected[name + ":0"] = json.loads(shape)
    assert names == expected
    assert set(assignment_map) == {n[:-2] for n in expected}
    assert all(assignment_map[k] == k for k in assignment_map)
    assert set(initialized) == set(expected) | {n[:-2] for n in expected}
    assert set(initialized.values()) == {1}


def test_one_hot_embeddings_give_the_same_outputs(fixture_run):
    ckpt, (out, _, _, _, _), _ = fixture_run
    one_hot, *_ = _run_fixture_model(ckpt, use_one_hot_embeddings=True)
    np.testing.assert_allclose(one_hot["sequence_output"], out["sequence_output"], atol=1e-6,
                               rtol=0)
    np.testing.assert_allclose(one_hot["pooled_output"], out["pooled_output"], atol=1e-6, rtol=0)


def test_embedding_table_is_the_word_embedding_variable(fixture_run):
    _, (_, _, _, _, model), _ = fixture_run
    table = model.get_embedding_table()
    assert table.name == "bert/embeddings/word_embeddings:0"
    assert table.shape.as_list() == [30522, 128]


def _tiny_config(**overrides):
    kwargs = dict(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=24, max_position_embeddings=32, type_vocab_size=3)
    kwargs.update(overrides)
    return modeling.BertConfig(**kwargs)


def test_scope_reuse_shares_every_variable_and_scope_names_the_root():
    """A second model in scope "bert" under a reusing scope makes no new variable (no
    `dense_1`); `scope=` replaces the root name; the default name is uniquified ("bert_1") by
    tf.compat.v1.variable_scope, as in the original."""
    with tf.Graph().as_default():
        ids = tf.constant([[1, 2, 3]])
        modeling.BertModel(_tiny_config(), is_training=True, input_ids=ids)
        count = len(tf.compat.v1.global_variables())
        with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(), reuse=True):
            modeling.BertModel(_tiny_config(), is_training=False, input_ids=ids, scope="bert")
        assert len(tf.compat.v1.global_variables()) == count
        modeling.BertModel(_tiny_config(), is_training=False, input_ids=ids, scope="student")
        names = {v.name for v in tf.compat.v1.global_variables()}
    assert "bert/pooler/dense/kernel:0" in names
    assert "bert/encoder/layer_1/attention/self/value/bias:0" in names
    assert "student/encoder/layer_1/output/LayerNorm/gamma:0" in names
    assert len(names) == 2 * count
    assert not any("dense_1" in n for n in names)


def test_layer_norm_variables_are_model_variables_beta_first():
    with tf.Graph().as_default():
        modeling.layer_norm(tf.zeros([2, 5]))
        modeling.layer_norm(tf.zeros([2, 5]), name="mine")
        model_vars = [v.name for v in tf.compat.v1.get_collection(
            tf.compat.v1.GraphKeys.MODEL_VARIABLES)]
        trainable = [v.name for v in tf.compat.v1.trainable_variables()]
    assert model_vars == ["LayerNorm/beta:0", "LayerNorm/gamma:0", "mine/beta:0", "mine/gamma:0"]
    assert trainable == model_vars


def test_config_semantics_are_the_originals(tmp_path, caplog):
    # heads not dividing hidden_size: accepted at construction, refused when the model is built
    config = modeling.BertConfig(vocab_size=99, hidden_size=37)
    assert json.loads(config.to_json_string())["hidden_size"] == 37
    with tf.Graph().as_default(), pytest.raises(ValueError, match="not a multiple"):
        modeling.BertModel(config, is_training=False, input_ids=tf.constant([[1, 2]]))

    defaults = modeling.BertConfig(vocab_size=7).to_dict()
    assert defaults == {"vocab_size": 7, "hidden_size": 768, "num_hidden_layers": 12,
                        "num_attention_heads": 12, "hidden_act": "gelu",
                        "intermediate_size": 3072, "hidden_dropout_prob": 0.1,
                        "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 512,
                        "type_vocab_size": 16, "initializer_range": 0.02}
    text = config.to_json_string()
    assert text.endswith("}\n") and text == json.dumps(config.to_dict(), indent=2,
                                                       sort_keys=True) + "\n"

    # from_dict keeps every key (the original sets them as attributes); a typo is warned about
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps({"vocab_size": 10, "num_hidden_layer": 3, "directionality": "bidi"}))
    with caplog.at_level("WARNING"):
        loaded = modeling.BertConfig.from_json_file(path)
    assert loaded.num_hidden_layer == 3 and loaded.num_hidden_layers == 12
    assert loaded.directionality == "bidi"
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "'num_hidden_layer'" in warned and "did you mean 'num_hidden_layers'" in warned
    assert "directionality" not in warned
    # to_dict is a deep copy
    loaded.to_dict()["vocab_size"] = 0
    assert loaded.vocab_size == 10


def test_bert_model_leaves_the_callers_config_alone():
    config = _tiny_config()
    with tf.Graph().as_default():
        modeling.BertModel(config, is_training=False, input_ids=tf.constant([[1, 2]]))
    assert config.hidden_dropout_prob == 0.1 and config.attention_probs_dropout_prob == 0.1


def test_dynamic_batch_and_length():
    """Placeholders of unknown batch and length: the dims become tensors, the model runs."""
    with tf.Graph().as_default() as graph:
        ids = tf.compat.v1.placeholder(tf.int32, [None, None])
        model = modeling.BertModel(_tiny_config(), is_training=False, input_ids=ids,
                                   input_mask=tf.ones_like(ids))
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            seq, pooled = sess.run([model.get_sequence_output(), model.get_pooled_output()],
                                   {ids: [[1, 2, 3, 4, 5], [6, 7, 8, 0, 0]]})
    assert seq.shape == (2, 5, 16) and pooled.shape == (2, 16)


def test_sequence_longer_than_the_position_table_is_refused():
    with tf.Graph().as_default(), pytest.raises((ValueError, tf.errors.InvalidArgumentError)):
        modeling.BertModel(_tiny_config(max_position_embeddings=4), is_training=False,
                           input_ids=tf.zeros([1, 5], tf.int32))


def test_variable_creating_functions_refuse_eager_mode():
    assert tf.executing_eagerly()
    with pytest.raises(RuntimeError, match="graph mode"):
        modeling.BertModel(_tiny_config(), is_training=False, input_ids=tf.constant([[1, 2]]))
    with pytest.raises(RuntimeError, match="graph mode"):
        modeling.layer_norm(tf.zeros([2, 3]))
    with pytest.raises(RuntimeError, match="graph mode"):
        modeling.transformer_model(tf.zeros([1, 2, 16]), hidden_size=16, num_attention_heads=4)
