"""Checkpoints between `bert_tf.original.modeling.BertModel` (tf.compat.v1 graph, Saver /
init_from_checkpoint) and bert_tf's Keras `BertEncoder` (load_original_checkpoint /
save_original_checkpoint), both ways, with equal outputs. No fixture needed."""
import numpy as np
import tensorflow as tf

from bert_tf.checkpoints import load_original_checkpoint, save_original_checkpoint
from bert_tf.modeling import BertConfig as KerasBertConfig
from bert_tf.modeling import BertEncoder
from bert_tf.original import modeling

ATOL = 1e-5
CONFIG = dict(vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
              intermediate_size=48, hidden_act="gelu", max_position_embeddings=16,
              type_vocab_size=3)


def _inputs():
    rng = np.random.RandomState(7)
    ids = rng.randint(1, CONFIG["vocab_size"], size=[3, 9]).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, 6:] = 0
    mask[2, 3:] = 0
    types = rng.randint(0, CONFIG["type_vocab_size"], size=ids.shape).astype(np.int32)
    return ids, mask, types


def _random_values(name, shape, rng):
    """Far from the default init, so that a swapped or missing parameter shows."""
    if name.endswith("/gamma"):
        return 1.0 + 0.2 * rng.randn(*shape)
    if name.endswith("/beta") or name.endswith("/bias"):
        return 0.1 * rng.randn(*shape)
    if name.endswith("/kernel"):
        return rng.randn(*shape) / np.sqrt(shape[0])
    return 0.2 * rng.randn(*shape)  # embeddings


def _graph_model(ids, mask, types):
    config = modeling.BertConfig(**CONFIG)
    model = modeling.BertModel(config, is_training=False, input_ids=tf.constant(ids),
                               input_mask=tf.constant(mask), token_type_ids=tf.constant(types))
    fetches = {"embedding_output": model.get_embedding_output(),
               "encoder_outputs": model.get_all_encoder_layers(),
               "sequence_output": model.get_sequence_output(),
               "pooled_output": model.get_pooled_output()}
    return fetches


def _encoder_outputs(encoder, ids, mask, types):
    out = encoder({"input_word_ids": tf.constant(ids), "input_mask": tf.constant(mask),
                   "input_type_ids": tf.constant(types)}, training=False)
    return {"embedding_output": out["embedding_output"].numpy(),
            "encoder_outputs": [t.numpy() for t in out["encoder_outputs"]],
            "sequence_output": out["sequence_output"].numpy(),
            "pooled_output": out["pooled_output"].numpy()}


def _assert_same(a, b):
    for key in ("embedding_output", "sequence_output", "pooled_output"):
        np.testing.assert_allclose(a[key], b[key], atol=ATOL, rtol=0, err_msg=key)
    np.testing.assert_allclose(np.stack(a["encoder_outputs"]), np.stack(b["encoder_outputs"]),
                               atol=ATOL, rtol=0)


def test_saver_checkpoint_loads_into_bert_tf_encoder(tmp_path):
    ids, mask, types = _inputs()
    prefix = str(tmp_path / "bert_model.ckpt")
    rng = np.random.RandomState(3)
    with tf.Graph().as_default() as graph:
        fetches = _graph_model(ids, mask, types)
        tvars = tf.compat.v1.trainable_variables()
        saver = tf.compat.v1.train.Saver(tvars)
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for var in tvars:
                var.load(_random_values(var.op.name, var.shape.as_list(), rng), sess)
            graph_out = sess.run(fetches)
            saver.save(sess, prefix, write_meta_graph=False, write_state=False)
    names = {name for name, _ in tf.train.list_variables(prefix)}
    assert "bert/encoder/layer_0/attention/self/query/kernel" in names
    assert "bert/pooler/dense/kernel" in names and len(names) == 5 + 16 * 2 + 2

    encoder = BertEncoder(KerasBertConfig.from_dict(modeling.BertConfig(**CONFIG).to_dict()))
    encoder.build_from_config_shapes()
    report = load_original_checkpoint(encoder, prefix)
    assert sorted(report["loaded"]) == sorted(names) and not report["unused"]
    _assert_same(_encoder_outputs(encoder, ids, mask, types), graph_out)


def test_bert_tf_checkpoint_loads_into_bert_model_with_init_from_checkpoint(tmp_path):
    ids, mask, types = _inputs()
    prefix = str(tmp_path / "from_keras.ckpt")
    encoder = BertEncoder(KerasBertConfig.from_dict(modeling.BertConfig(**CONFIG).to_dict()))
    encoder.build_from_config_shapes()
    rng = np.random.RandomState(5)
    for var in encoder.weights:
        var.assign(_random_values(var.path, var.shape, rng).astype(np.float32))
    save_original_checkpoint(encoder, prefix)
    keras_out = _encoder_outputs(encoder, ids, mask, types)

    with tf.Graph().as_default() as graph:
        fetches = _graph_model(ids, mask, types)
        tvars = tf.compat.v1.trainable_variables()
        assignment_map, initialized = modeling.get_assignment_map_from_checkpoint(tvars, prefix)
        assert all(v.name in initialized for v in tvars)
        tf.compat.v1.train.init_from_checkpoint(prefix, assignment_map)
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            graph_out = sess.run(fetches)
    _assert_same(graph_out, keras_out)
