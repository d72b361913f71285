"""`bert_tf.original.optimization` against the original's update rule written out in numpy, on the
original `optimization_test.py`'s toy problem, and against the original release's own 5 training
steps of the tiny BERT (../shared/fixtures/original/optimizer, README §5: 1e-6 on parameters)."""
import json

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.original import modeling, optimization

W0 = [0.1, -0.2, -0.1]
X = [0.4, 0.2, -0.5]
B0 = [0.3, -0.3]


def adam_weight_decay_step(param, grad, m, v, lr, weight_decay_rate=0.0, decay=True,
                           beta_1=0.9, beta_2=0.999, epsilon=1e-6):
    """The original AdamWeightDecayOptimizer's rule: no bias correction, the decay added to the
    update before the learning rate."""
    m = beta_1 * m + (1.0 - beta_1) * grad
    v = beta_2 * v + (1.0 - beta_2) * grad * grad
    update = m / (np.sqrt(v) + epsilon)
    if decay and weight_decay_rate:
        update = update + weight_decay_rate * param
    return param - lr * update, m, v


def original_learning_rate(step, init_lr, num_train_steps, num_warmup_steps):
    """Linear warm-up to init_lr, then linear decay to 0 at num_train_steps (then 0)."""
    if num_warmup_steps and step < num_warmup_steps:
        return init_lr * step / num_warmup_steps
    return init_lr * (1.0 - min(step, num_train_steps) / num_train_steps)


def _toy_graph():
    w = tf.compat.v1.get_variable("w", shape=[3],
                                  initializer=tf.compat.v1.constant_initializer(W0))
    x = tf.constant(X)
    return w, tf.reduce_mean(tf.square(x - w))


def test_adam_weight_decay_optimizer_trajectory_on_the_original_toy_problem():
    """The original test's problem and call (learning_rate=0.2, default decay 0.0), 100 steps:
    every step within 1e-6 of the rule; it converges as the original test asserts."""
    with tf.Graph().as_default() as graph:
        w, loss = _toy_graph()
        tvars = tf.compat.v1.trainable_variables()
        grads = tf.gradients(loss, tvars)
        global_step = tf.compat.v1.train.get_or_create_global_step()
        optimizer = optimization.AdamWeightDecayOptimizer(learning_rate=0.2)
        assert optimizer.weight_decay_rate == 0.0 and optimizer.exclude_from_weight_decay is None
        train_op = optimizer.apply_gradients(zip(grads, tvars), global_step)
        slots = {v.name for v in tf.compat.v1.global_variables()} - {"w:0", "global_step:0"}
        assert slots == {"w/adam_m:0", "w/adam_v:0"}
        assert not any("adam" in v.name for v in tf.compat.v1.trainable_variables())
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            trajectory = []
            for _ in range(100):
                sess.run(train_op)
                trajectory.append(sess.run(w))
            assert sess.run(global_step) == 0  # apply_gradients does not increment it
    p, m, v = np.array(W0, np.float64), np.zeros(3), np.zeros(3)
    expected = []
    for _ in range(100):
        p, m, v = adam_weight_decay_step(p, 2.0 / 3.0 * (p - np.array(X)), m, v, lr=0.2)
        expected.append(p)
    np.testing.assert_allclose(np.array(trajectory), np.array(expected), atol=1e-6, rtol=0)
    np.testing.assert_allclose(trajectory[-1], X, atol=1e-2)


def test_create_optimizer_trajectory_schedule_clipping_and_decay_exclusions():
    """create_optimizer on the toy problem plus an excluded `.../bias`, scaled so that clipping
    acts: warm-up over 2 steps, linear decay to 0 at step 10, 12 steps, global step counted."""
    init_lr, train_steps, warmup, steps, scale = 0.1, 10, 2, 12, 4.0
    with tf.Graph().as_default() as graph:
        w, loss = _toy_graph()
        with tf.compat.v1.variable_scope("layer"):
            b = tf.compat.v1.get_variable("bias", shape=[2],
                                          initializer=tf.compat.v1.constant_initializer(B0))
        total = scale * (loss + tf.reduce_sum(tf.square(b)))
        train_op = optimization.create_optimizer(total, init_lr, train_steps, warmup,
                                                 use_tpu=False)
        global_step = tf.compat.v1.train.get_global_step()
        names = {v.name for v in tf.compat.v1.global_variables()}
        assert {"w/adam_m:0", "w/adam_v:0", "layer/bias/adam_m:0", "layer/bias/adam_v:0"} <= names
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            got = []
            for _ in range(steps):
                sess.run(train_op)
                got.append(np.concatenate(sess.run([w, b])))
            assert sess.run(global_step) == steps

    pw, pb = np.array(W0, np.float64), np.array(B0, np.float64)
    mw, vw, mb, vb = np.zeros(3), np.zeros(3), np.zeros(2), np.zeros(2)
    expected, clipped = [], 0
    for step in range(steps):
        gw = scale * 2.0 / 3.0 * (pw - np.array(X))
        gb = scale * 2.0 * pb
        norm = np.sqrt(np.sum(gw ** 2) + np.sum(gb ** 2))
        if norm > 1.0:
            gw, gb, clipped = gw / norm, gb / norm, clipped + 1
        lr = original_learning_rate(step, init_lr, train_steps, warmup)
        pw, mw, vw = adam_weight_decay_step(pw, gw, mw, vw, lr, weight_decay_rate=0.01)
        pb, mb, vb = adam_weight_decay_step(pb, gb, mb, vb, lr, weight_decay_rate=0.01,
                                            decay=False)
        expected.append(np.concatenate([pw, pb]))
    assert clipped >= 3
    np.testing.assert_allclose(np.array(got), np.array(expected), atol=1e-6, rtol=0)
    # step 0 has lr 0 and steps 10, 11 are past the decay: nothing moves there
    np.testing.assert_array_equal(got[0], np.concatenate([W0, B0]).astype(np.float32))
    np.testing.assert_array_equal(got[-1], got[-3])


def test_weight_decay_exclusion_and_variable_names():
    opt = optimization.AdamWeightDecayOptimizer(
        0.1, weight_decay_rate=0.01, exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"])
    assert opt._get_variable_name("bert/pooler/dense/kernel:0") == "bert/pooler/dense/kernel"
    assert opt._get_variable_name("no_suffix") == "no_suffix"
    assert opt._do_use_weight_decay("bert/pooler/dense/kernel")
    assert not opt._do_use_weight_decay("bert/embeddings/LayerNorm/gamma")
    assert not opt._do_use_weight_decay("bert/pooler/dense/bias")
    assert not optimization.AdamWeightDecayOptimizer(0.1)._do_use_weight_decay("w")
    assert isinstance(opt, tf.compat.v1.train.Optimizer)
    assert opt.get_name() == "AdamWeightDecayOptimizer"


def test_graph_mode_is_required():
    with pytest.raises(RuntimeError, match="graph mode"):
        optimization.create_optimizer(tf.constant(1.0), 1e-4, 10, 1, False)
    v = tf.Variable([1.0])
    with pytest.raises(RuntimeError, match="graph mode"):
        optimization.AdamWeightDecayOptimizer(0.1).apply_gradients([(tf.constant([1.0]), v)])


# ---- bert_tf's Keras AdamWeightDecay: plain tf.Variables, and its (documented) defaults --------

def _keras_toy_trajectory(optimizer, steps=100, name="w"):
    """The original test's problem, eagerly, on a plain `tf.Variable` (no Keras `.path`)."""
    w = tf.Variable(W0, name=name)
    x = tf.constant(X)
    trajectory = []
    for _ in range(steps):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(x - w))
        optimizer.apply_gradients([(tape.gradient(loss, w), w)])
        trajectory.append(w.numpy())
    return np.array(trajectory)


def _rule_trajectory(steps=100, **kwargs):
    p, m, v = np.array(W0, np.float64), np.zeros(3), np.zeros(3)
    out = []
    for _ in range(steps):
        p, m, v = adam_weight_decay_step(p, 2.0 / 3.0 * (p - np.array(X)), m, v, lr=0.2, **kwargs)
        out.append(p)
    return np.array(out)


@pytest.mark.parametrize("fused", [False, True])
def test_keras_adam_weight_decay_on_a_plain_tf_variable(fused):
    """Before: `'ResourceVariable' object has no attribute 'path'`. With the original class's
    defaults (no decay) and the op-by-op update it follows the original's rule as
    `AdamWeightDecayOptimizer` does (1e-6 over the 100 steps); the fused kernel (the default)
    rounds differently (1e-5 apart on this problem's first steps, whose updates are ~3x the
    learning rate) and converges as the original test asserts."""
    from bert_tf.training import AdamWeightDecay

    got = _keras_toy_trajectory(AdamWeightDecay(0.2, weight_decay_rate=0.0,
                                                exclude_from_weight_decay=(), fused=fused))
    if not fused:
        np.testing.assert_allclose(got, _rule_trajectory(), atol=1e-6, rtol=0)
    np.testing.assert_allclose(got[-1], X, atol=1e-2)


def test_keras_adam_weight_decay_defaults_are_berts_recipe():
    """bert_tf's AdamWeightDecay keeps BERT's 0.01 and the LayerNorm/bias exclusions as defaults
    (what every script's create_optimizer sets; docs/switching.md): on the toy problem that is the
    rule with decay 0.01 (1.6e-4 from the original class's no-decay default after 100 steps), and
    a variable named .../bias is not decayed."""
    from bert_tf.training import AdamWeightDecay

    default = AdamWeightDecay(0.2, fused=False)
    assert default.weight_decay_rate == 0.01
    assert default.exclude_from_weight_decay == ("LayerNorm", "layer_norm", "bias")
    got = _keras_toy_trajectory(default, name="w")
    np.testing.assert_allclose(got, _rule_trajectory(weight_decay_rate=0.01), atol=1e-6, rtol=0)
    assert 1e-4 < np.abs(got[-1] - _rule_trajectory()[-1]).max() < 3e-4
    excluded = _keras_toy_trajectory(AdamWeightDecay(0.2, fused=False), name="dense/bias")
    np.testing.assert_allclose(excluded, _rule_trajectory(), atol=1e-6, rtol=0)
    # variable_names (by id or path) decide the name used for the exclusions
    v = tf.Variable([1.0], name="x")
    named = AdamWeightDecay(0.2, variable_names={id(v): "bert/embeddings/LayerNorm/gamma"})
    assert named.variable_name(v) == "bert/embeddings/LayerNorm/gamma"
    assert not named.uses_weight_decay(v)
    assert AdamWeightDecay(0.2).variable_name(v) == "x"


# ---- the original release's 5 pretraining steps -----------------------------------------------

def _pretraining_loss(config, batch):
    """The original run_pretraining's masked-LM + next-sentence losses, written out here."""
    feeds = {k: tf.constant(np.asarray(batch[k], np.int32)) for k in
             ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
              "next_sentence_labels")}
    weights = tf.constant(np.asarray(batch["masked_lm_weights"], np.float32))
    model = modeling.BertModel(config, is_training=True, input_ids=feeds["input_ids"],
                               input_mask=feeds["input_mask"],
                               token_type_ids=feeds["segment_ids"])
    init = modeling.create_initializer(config.initializer_range)
    seq = model.get_sequence_output()
    batch_size, seq_length, width = modeling.get_shape_list(seq, expected_rank=3)
    offsets = tf.reshape(tf.range(batch_size) * seq_length, [-1, 1])
    flat_positions = tf.reshape(feeds["masked_lm_positions"] + offsets, [-1])
    hidden = tf.gather(tf.reshape(seq, [batch_size * seq_length, width]), flat_positions)
    with tf.compat.v1.variable_scope("cls/predictions"):
        with tf.compat.v1.variable_scope("transform"):
            with tf.compat.v1.variable_scope("dense"):
                kernel = tf.compat.v1.get_variable("kernel", [width, width], initializer=init)
                bias = tf.compat.v1.get_variable("bias", [width],
                                                 initializer=tf.compat.v1.zeros_initializer())
            hidden = modeling.get_activation(config.hidden_act)(
                tf.nn.bias_add(tf.matmul(hidden, kernel), bias))
            hidden = modeling.layer_norm(hidden)
        output_bias = tf.compat.v1.get_variable("output_bias", [config.vocab_size],
                                                initializer=tf.compat.v1.zeros_initializer())
        logits = tf.nn.bias_add(tf.matmul(hidden, model.get_embedding_table(), transpose_b=True),
                                output_bias)
        log_probs = tf.nn.log_softmax(logits, axis=-1)
        one_hot = tf.one_hot(tf.reshape(feeds["masked_lm_ids"], [-1]), depth=config.vocab_size)
        per_example = -tf.reduce_sum(log_probs * one_hot, axis=[-1])
        flat_weights = tf.reshape(weights, [-1])
        mlm_loss = tf.reduce_sum(flat_weights * per_example) / (tf.reduce_sum(flat_weights) + 1e-5)
    with tf.compat.v1.variable_scope("cls/seq_relationship"):
        output_weights = tf.compat.v1.get_variable("output_weights", [2, width], initializer=init)
        output_bias = tf.compat.v1.get_variable("output_bias", [2],
                                                initializer=tf.compat.v1.zeros_initializer())
        logits = tf.nn.bias_add(tf.matmul(model.get_pooled_output(), output_weights,
                                          transpose_b=True), output_bias)
        log_probs = tf.nn.log_softmax(logits, axis=-1)
        labels = tf.one_hot(tf.reshape(feeds["next_sentence_labels"], [-1]), depth=2)
        nsp_loss = tf.reduce_mean(-tf.reduce_sum(labels * log_probs, axis=-1))
    return mlm_loss + nsp_loss


def test_create_optimizer_reproduces_the_original_five_pretraining_steps(original_fixtures):
    opt_dir = original_fixtures / "optimizer"
    log = json.loads((opt_dir / "training_log.json").read_text())
    config = modeling.BertConfig.from_json_file(opt_dir / "bert_config_no_dropout.json")
    init_ckpt = str(original_fixtures / "checkpoint" / "bert_model.ckpt")
    with tf.Graph().as_default() as graph:
        total_loss = _pretraining_loss(config, log["batch"])
        tvars = tf.compat.v1.trainable_variables()
        assignment_map, _ = modeling.get_assignment_map_from_checkpoint(tvars, init_ckpt)
        assert len(assignment_map) == len(tvars) == 46
        tf.compat.v1.train.init_from_checkpoint(init_ckpt, assignment_map)
        train_op = optimization.create_optimizer(total_loss, log["init_lr"],
                                                 log["num_train_steps"], log["num_warmup_steps"],
                                                 use_tpu=False)
        variables = {v.name[:-2]: v for v in tf.compat.v1.global_variables()}
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            losses = [sess.run([train_op, total_loss])[1] for _ in range(log["steps_run"])]
            after = sess.run(variables)
    np.testing.assert_allclose(losses, [s["total_loss"] for s in log["steps"]], atol=1e-5, rtol=0)

    reader = tf.train.load_checkpoint(str(opt_dir / "after_5_steps.ckpt"))
    expected_names = set(reader.get_variable_to_shape_map())
    assert expected_names <= set(after)  # every trainable variable, slot and global_step
    assert set(after) - expected_names == {"bert/embeddings/word_embeddings/adam_m",
                                           "bert/embeddings/word_embeddings/adam_v"}
    assert after["global_step"] == 5
    for name in sorted(expected_names):
        atol = 1e-9 if name.endswith("/adam_v") else 1e-6
        np.testing.assert_allclose(after[name], reader.get_tensor(name), atol=atol, rtol=0,
                                   err_msg=name)
    stats = np.load(opt_dir / "word_embeddings_adam_slots_stats.npz")
    np.testing.assert_allclose(
        np.linalg.norm(after["bert/embeddings/word_embeddings/adam_m"], axis=1),
        stats["adam_m_row_l2"], atol=1e-6, rtol=0)
    np.testing.assert_allclose(after["bert/embeddings/word_embeddings/adam_v"].sum(axis=1),
                               stats["adam_v_row_sum"], atol=1e-9, rtol=0)
