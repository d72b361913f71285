"""google-research/bert's `modeling` module API, as TF1-style functions on `tf.compat.v1`.

bert_tf's own implementation of the original's names, signatures, defaults and semantics (the
original uses `tf.contrib` and `tf.layers`, gone in TF 2 / Keras 3): everything is built in a
`tf.compat.v1` graph under `tf.compat.v1.variable_scope`s with the original variable names::

    bert/embeddings/{word_embeddings, token_type_embeddings, position_embeddings}
    bert/embeddings/LayerNorm/{beta, gamma}
    bert/encoder/layer_N/attention/self/{query, key, value}/{kernel, bias}
    bert/encoder/layer_N/attention/output/dense/{kernel, bias}, .../attention/output/LayerNorm/*
    bert/encoder/layer_N/intermediate/dense/*, bert/encoder/layer_N/output/{dense, LayerNorm}/*
    bert/pooler/dense/{kernel, bias}

so `get_assignment_map_from_checkpoint` + `tf.compat.v1.train.init_from_checkpoint` load Google's
checkpoints and `tf.compat.v1.train.Saver` writes them. The math is the original's op for op (the
tanh GELU, LayerNorm by `tf.nn.moments` + `tf.nn.batch_normalization` with epsilon 1e-12, the
-10000 attention-mask adder, masks from `input_mask` only); the outputs match the original
release's (../shared/fixtures/original/checkpoint) within 1e-5, as `bert_tf.modeling` does.

Functions that create variables need graph mode (see the package docstring); the rest also work
on eager tensors.

Differences from the original, none of which changes a result:
  * `BertConfig.from_dict` / `from_json_file` log a warning for a key that is no config field
    (with the nearest field when there is one, e.g. `num_hidden_layer`), except the extra fields
    of Google's published configs (`directionality`, `pooler_*`); the key is still set as an
    attribute, as in the original.
  * `get_shape_list` / `assert_rank` also accept eager tensors (which have no `.name`).
  * Variable-creating functions called eagerly raise `RuntimeError` instead of silently making
    fresh variables at every call.
"""
from __future__ import annotations

import collections
import copy
import difflib
import json
import math
import numbers
import re

import tensorflow as tf
from absl import logging

from bert_tf.modeling.activations import gelu as _bert_tf_gelu

_CONFIG_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                  "hidden_act", "intermediate_size", "hidden_dropout_prob",
                  "attention_probs_dropout_prob", "max_position_embeddings", "type_vocab_size",
                  "initializer_range")
# Extra keys of Google's published bert_config.json files (Chinese, multilingual): no warning.
_KNOWN_EXTRA_FIELDS = ("directionality", "pooler_fc_size", "pooler_num_attention_heads",
                       "pooler_num_fc_layers", "pooler_size_per_head", "pooler_type")


class BertConfig(object):
    """Configuration for `BertModel` (the original's class: plain attributes, no validation).

    As in the original, nothing is checked at construction: a `num_attention_heads` that does not
    divide `hidden_size` fails only when the model is built (in `transformer_model`).
    """

    def __init__(self,
                 vocab_size,
                 hidden_size=768,
                 num_hidden_layers=12,
                 num_attention_heads=12,
                 intermediate_size=3072,
                 hidden_act="gelu",
                 hidden_dropout_prob=0.1,
                 attention_probs_dropout_prob=0.1,
                 max_position_embeddings=512,
                 type_vocab_size=16,
                 initializer_range=0.02):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.hidden_act = hidden_act
        self.intermediate_size = intermediate_size
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.initializer_range = initializer_range

    @classmethod
    def from_dict(cls, json_object):
        """A config from a dict: the defaults, then every key of `json_object` set as is."""
        config = cls(vocab_size=None)
        for key, value in json_object.items():
            if key not in _CONFIG_FIELDS and key not in _KNOWN_EXTRA_FIELDS:
                near = difflib.get_close_matches(str(key), _CONFIG_FIELDS, n=1)
                logging.warning("BertConfig: unknown field %r%s; it is kept as an attribute and "
                                "the model does not use it", key,
                                f" (did you mean {near[0]!r}?)" if near else "")
            config.__dict__[key] = value
        return config

    @classmethod
    def from_json_file(cls, json_file):
        """A config from a JSON file (any path `tf.io.gfile` opens)."""
        with tf.io.gfile.GFile(str(json_file), "r") as reader:
            text = reader.read()
        return cls.from_dict(json.loads(text))

    def to_dict(self):
        """A deep copy of the attributes."""
        return copy.deepcopy(self.__dict__)

    def to_json_string(self):
        """JSON, indent 2, sorted keys, with a trailing newline (the original's format)."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"


def _require_graph(what):
    if tf.executing_eagerly():
        raise RuntimeError(
            f"bert_tf.original: {what} creates tf.compat.v1 variables and needs graph mode, as "
            "the original did (eagerly, every call would make fresh random variables); build it "
            "inside `with tf.Graph().as_default():` or after "
            "`tf.compat.v1.disable_v2_behavior()`, or use bert_tf.modeling.BertEncoder for "
            "eager / Keras code")


class BertModel(object):
    """BERT ("Bidirectional Encoder Representations from Transformers"), the original's class.

    Builds the graph in `__init__` under `scope` (default "bert"); `is_training=False` turns
    dropout off. `input_mask` defaults to ones, `token_type_ids` to zeros.
    """

    def __init__(self,
                 config,
                 is_training,
                 input_ids,
                 input_mask=None,
                 token_type_ids=None,
                 use_one_hot_embeddings=False,
                 scope=None):
        _require_graph("BertModel")
        config = copy.deepcopy(config)
        if not is_training:
            config.hidden_dropout_prob = 0.0
            config.attention_probs_dropout_prob = 0.0

        input_shape = get_shape_list(input_ids, expected_rank=2)
        batch_size = input_shape[0]
        seq_length = input_shape[1]

        if input_mask is None:
            input_mask = tf.ones(shape=[batch_size, seq_length], dtype=tf.int32)
        if token_type_ids is None:
            token_type_ids = tf.zeros(shape=[batch_size, seq_length], dtype=tf.int32)

        with tf.compat.v1.variable_scope(scope, default_name="bert"):
            with tf.compat.v1.variable_scope("embeddings"):
                self.embedding_output, self.embedding_table = embedding_lookup(
                    input_ids=input_ids,
                    vocab_size=config.vocab_size,
                    embedding_size=config.hidden_size,
                    initializer_range=config.initializer_range,
                    word_embedding_name="word_embeddings",
                    use_one_hot_embeddings=use_one_hot_embeddings)
                self.embedding_output = embedding_postprocessor(
                    input_tensor=self.embedding_output,
                    use_token_type=True,
                    token_type_ids=token_type_ids,
                    token_type_vocab_size=config.type_vocab_size,
                    token_type_embedding_name="token_type_embeddings",
                    use_position_embeddings=True,
                    position_embedding_name="position_embeddings",
                    initializer_range=config.initializer_range,
                    max_position_embeddings=config.max_position_embeddings,
                    dropout_prob=config.hidden_dropout_prob)

            with tf.compat.v1.variable_scope("encoder"):
                attention_mask = create_attention_mask_from_input_mask(input_ids, input_mask)
                self.all_encoder_layers = transformer_model(
                    input_tensor=self.embedding_output,
                    attention_mask=attention_mask,
                    hidden_size=config.hidden_size,
                    num_hidden_layers=config.num_hidden_layers,
                    num_attention_heads=config.num_attention_heads,
                    intermediate_size=config.intermediate_size,
                    intermediate_act_fn=get_activation(config.hidden_act),
                    hidden_dropout_prob=config.hidden_dropout_prob,
                    attention_probs_dropout_prob=config.attention_probs_dropout_prob,
                    initializer_range=config.initializer_range,
                    do_return_all_layers=True)

            self.sequence_output = self.all_encoder_layers[-1]
            with tf.compat.v1.variable_scope("pooler"):
                # The hidden state of the first token ([CLS]) through dense + tanh.
                first_token_tensor = tf.squeeze(self.sequence_output[:, 0:1, :], axis=1)
                self.pooled_output = _dense(
                    first_token_tensor,
                    config.hidden_size,
                    activation=tf.tanh,
                    kernel_initializer=create_initializer(config.initializer_range))

    def get_pooled_output(self):
        """[batch_size, hidden_size]: tanh(dense(first token of the last layer))."""
        return self.pooled_output

    def get_sequence_output(self):
        """[batch_size, seq_length, hidden_size]: the last encoder layer."""
        return self.sequence_output

    def get_all_encoder_layers(self):
        """List of num_hidden_layers tensors [batch_size, seq_length, hidden_size]."""
        return self.all_encoder_layers

    def get_embedding_output(self):
        """[batch_size, seq_length, hidden_size]: word + token-type + position embeddings,
        LayerNorm and dropout: the input of the first layer."""
        return self.embedding_output

    def get_embedding_table(self):
        """The word embedding variable [vocab_size, hidden_size]."""
        return self.embedding_table


def gelu(x):
    """GELU, tanh approximation: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))).

    The same function as `bert_tf.modeling.gelu` (hence the same numbers); works eagerly too.
    """
    return _bert_tf_gelu(x)


def get_activation(activation_string):
    """Maps an activation name to a function, the original's rules.

    Anything that is not a string is returned as is (a callable, or None); "" and "linear" (any
    case) give None; "relu", "gelu", "tanh" (any case) their functions; any other string raises
    ValueError("Unsupported activation: <name lower-cased>").
    """
    if not isinstance(activation_string, str):
        return activation_string
    if not activation_string:
        return None
    act = activation_string.lower()
    if act == "linear":
        return None
    if act == "relu":
        return tf.nn.relu
    if act == "gelu":
        return gelu
    if act == "tanh":
        return tf.tanh
    raise ValueError("Unsupported activation: %s" % act)


def get_assignment_map_from_checkpoint(tvars, init_checkpoint):
    """Which of `tvars` are in the checkpoint, by name.

    Returns (assignment_map, initialized_variable_names): an OrderedDict {checkpoint name: the
    same name} in checkpoint order, for `tf.compat.v1.train.init_from_checkpoint`, and a dict
    holding every matched name with and without ":0" (value 1).
    """
    name_to_variable = collections.OrderedDict()
    for var in tvars:
        name = var.name
        m = re.match("^(.*):\\d+$", name)
        if m is not None:
            name = m.group(1)
        name_to_variable[name] = var

    assignment_map = collections.OrderedDict()
    initialized_variable_names = {}
    for name, _ in tf.train.list_variables(init_checkpoint):
        if name not in name_to_variable:
            continue
        assignment_map[name] = name
        initialized_variable_names[name] = 1
        initialized_variable_names[name + ":0"] = 1
    return assignment_map, initialized_variable_names


def dropout(input_tensor, dropout_prob):
    """Dropout with `dropout_prob` the probability of DROPPING a value; None or 0.0 returns the
    input itself."""
    if dropout_prob is None or dropout_prob == 0.0:
        return input_tensor
    return tf.nn.dropout(input_tensor, rate=dropout_prob)


def layer_norm(input_tensor, name=None):
    """Layer normalization over the last axis, as the TF1 contrib `layer_norm` the original used.

    Variables `<name or LayerNorm>/beta` (zeros) then `/gamma` (ones), shape [last dim], in
    GLOBAL_VARIABLES, MODEL_VARIABLES and TRAINABLE_VARIABLES; `tf.nn.moments` (biased variance)
    and `tf.nn.batch_normalization` with epsilon 1e-12 (1e-3 for float16).
    """
    _require_graph("layer_norm")
    inputs = tf.convert_to_tensor(input_tensor)
    inputs_shape = inputs.shape
    inputs_rank = inputs_shape.rank
    if inputs_rank is None:
        raise ValueError("Inputs %s has undefined rank." % inputs.name)
    dtype = inputs.dtype.base_dtype
    with tf.compat.v1.variable_scope(name, default_name="LayerNorm", values=[inputs]):
        params_shape = inputs_shape[-1:]
        if not params_shape.is_fully_defined():
            raise ValueError("Inputs %s: shape(inputs)[-1:] is not fully defined: %s"
                             % (inputs.name, params_shape))
        collections_ = [tf.compat.v1.GraphKeys.GLOBAL_VARIABLES,
                        tf.compat.v1.GraphKeys.MODEL_VARIABLES]
        beta = tf.compat.v1.get_variable("beta", shape=params_shape, dtype=dtype,
                                         initializer=tf.compat.v1.zeros_initializer(),
                                         collections=collections_, trainable=True)
        gamma = tf.compat.v1.get_variable("gamma", shape=params_shape, dtype=dtype,
                                          initializer=tf.compat.v1.ones_initializer(),
                                          collections=collections_, trainable=True)
        mean, variance = tf.nn.moments(inputs, [inputs_rank - 1], keepdims=True)
        epsilon = 1e-3 if dtype == tf.float16 else 1e-12
        outputs = tf.nn.batch_normalization(inputs, mean, variance, offset=beta, scale=gamma,
                                            variance_epsilon=epsilon)
        outputs.set_shape(inputs_shape)
        return outputs


def layer_norm_and_dropout(input_tensor, dropout_prob, name=None):
    """`layer_norm` followed by `dropout`."""
    output_tensor = layer_norm(input_tensor, name)
    return dropout(output_tensor, dropout_prob)


def create_initializer(initializer_range=0.02):
    """`tf.compat.v1.truncated_normal_initializer(stddev=initializer_range)`."""
    return tf.compat.v1.truncated_normal_initializer(stddev=initializer_range)


def _dense(inputs, units, activation=None, name=None, kernel_initializer=None):
    """What the original's `tf.layers.dense` calls built (that API is gone under Keras 3).

    Variables `<name or dense>/kernel` [in, units] (`kernel_initializer`, else glorot uniform as
    get_variable's default) and `<name or dense>/bias` [units] (zeros); matmul, bias_add,
    activation. The default name is uniquified per variable scope, as the layer's was.
    """
    inputs = tf.convert_to_tensor(inputs)
    in_dim = inputs.shape[-1]
    if in_dim is None:
        raise ValueError("The last dimension of the inputs to `dense` should be defined. "
                         "Found `None`.")
    dtype = inputs.dtype.base_dtype
    with tf.compat.v1.variable_scope(name, default_name="dense", values=[inputs]):
        kernel = tf.compat.v1.get_variable("kernel", shape=[in_dim, units], dtype=dtype,
                                           initializer=kernel_initializer, trainable=True)
        bias = tf.compat.v1.get_variable("bias", shape=[units], dtype=dtype,
                                         initializer=tf.compat.v1.zeros_initializer(),
                                         trainable=True)
        rank = inputs.shape.rank
        if rank == 2:
            outputs = tf.matmul(inputs, kernel)
        else:
            outputs = tf.tensordot(inputs, kernel, [[rank - 1], [0]])
            outputs.set_shape(inputs.shape[:-1].concatenate([units]))
        outputs = tf.nn.bias_add(outputs, bias)
        if activation is not None:
            outputs = activation(outputs)
        return outputs


def embedding_lookup(input_ids,
                     vocab_size,
                     embedding_size=128,
                     initializer_range=0.02,
                     word_embedding_name="word_embeddings",
                     use_one_hot_embeddings=False):
    """Word embeddings of `input_ids` ([batch, seq] or [batch, seq, num_inputs]).

    Creates the table `word_embedding_name` [vocab_size, embedding_size] in the current variable
    scope. Returns (output [batch, seq, num_inputs * embedding_size], table). One-hot matmul when
    `use_one_hot_embeddings`, `tf.gather` otherwise (the same values).
    """
    _require_graph("embedding_lookup")
    if input_ids.shape.ndims == 2:
        input_ids = tf.expand_dims(input_ids, axis=[-1])

    embedding_table = tf.compat.v1.get_variable(
        name=word_embedding_name,
        shape=[vocab_size, embedding_size],
        initializer=create_initializer(initializer_range))

    flat_input_ids = tf.reshape(input_ids, [-1])
    if use_one_hot_embeddings:
        one_hot_input_ids = tf.one_hot(flat_input_ids, depth=vocab_size)
        output = tf.matmul(one_hot_input_ids, embedding_table)
    else:
        output = tf.gather(embedding_table, flat_input_ids)

    input_shape = get_shape_list(input_ids)
    output = tf.reshape(output, input_shape[0:-1] + [input_shape[-1] * embedding_size])
    return output, embedding_table


def embedding_postprocessor(input_tensor,
                            use_token_type=False,
                            token_type_ids=None,
                            token_type_vocab_size=16,
                            token_type_embedding_name="token_type_embeddings",
                            use_position_embeddings=True,
                            position_embedding_name="position_embeddings",
                            initializer_range=0.02,
                            max_position_embeddings=512,
                            dropout_prob=0.1):
    """Adds token-type (one-hot matmul) and position embeddings to `input_tensor`
    [batch, seq, width], then `layer_norm_and_dropout`.

    Raises ValueError when `use_token_type` and no `token_type_ids`; the graph asserts
    seq_length <= max_position_embeddings (a static violation raises at build time).
    """
    _require_graph("embedding_postprocessor")
    input_shape = get_shape_list(input_tensor, expected_rank=3)
    batch_size = input_shape[0]
    seq_length = input_shape[1]
    width = input_shape[2]

    output = input_tensor

    if use_token_type:
        if token_type_ids is None:
            raise ValueError("`token_type_ids` must be specified if"
                             "`use_token_type` is True.")
        token_type_table = tf.compat.v1.get_variable(
            name=token_type_embedding_name,
            shape=[token_type_vocab_size, width],
            initializer=create_initializer(initializer_range))
        flat_token_type_ids = tf.reshape(token_type_ids, [-1])
        one_hot_ids = tf.one_hot(flat_token_type_ids, depth=token_type_vocab_size)
        token_type_embeddings = tf.matmul(one_hot_ids, token_type_table)
        token_type_embeddings = tf.reshape(token_type_embeddings,
                                           [batch_size, seq_length, width])
        output += token_type_embeddings

    if use_position_embeddings:
        assert_op = tf.compat.v1.assert_less_equal(seq_length, max_position_embeddings)
        with tf.control_dependencies([assert_op]):
            full_position_embeddings = tf.compat.v1.get_variable(
                name=position_embedding_name,
                shape=[max_position_embeddings, width],
                initializer=create_initializer(initializer_range))
            # Positions 0..seq_length-1 of the (longer) learned table.
            position_embeddings = tf.slice(full_position_embeddings, [0, 0], [seq_length, -1])
            num_dims = len(output.shape.as_list())
            # Broadcast over every leading dimension (typically just the batch).
            position_broadcast_shape = [1] * (num_dims - 2) + [seq_length, width]
            position_embeddings = tf.reshape(position_embeddings, position_broadcast_shape)
            output += position_embeddings

    return layer_norm_and_dropout(output, dropout_prob)


def create_attention_mask_from_input_mask(from_tensor, to_mask):
    """[batch, from_seq] or [batch, from_seq, ...] and int mask [batch, to_seq] -> float32
    [batch, from_seq, to_seq]: every query row is the key mask (padding queries are computed
    too; only padding keys are masked)."""
    from_shape = get_shape_list(from_tensor, expected_rank=[2, 3])
    batch_size = from_shape[0]
    from_seq_length = from_shape[1]

    to_shape = get_shape_list(to_mask, expected_rank=2)
    to_seq_length = to_shape[1]

    to_mask = tf.cast(tf.reshape(to_mask, [batch_size, 1, to_seq_length]), tf.float32)
    broadcast_ones = tf.ones(shape=[batch_size, from_seq_length, 1], dtype=tf.float32)
    return broadcast_ones * to_mask


def attention_layer(from_tensor,
                    to_tensor,
                    attention_mask=None,
                    num_attention_heads=1,
                    size_per_head=512,
                    query_act=None,
                    key_act=None,
                    value_act=None,
                    attention_probs_dropout_prob=0.0,
                    initializer_range=0.02,
                    do_return_2d_tensor=False,
                    batch_size=None,
                    from_seq_length=None,
                    to_seq_length=None):
    """Multi-headed attention from `from_tensor` to `to_tensor` (the original's function).

    Dense layers `query`, `key`, `value` in the current variable scope; scores scaled by
    1/sqrt(size_per_head); `attention_mask` [B, F, T] of 1/0 adds -10000 where 0; softmax;
    dropout of the probabilities. Rank-2 inputs need `batch_size`, `from_seq_length` and
    `to_seq_length`. Returns [B, F, N*H], or [B*F, N*H] with `do_return_2d_tensor`.
    """
    _require_graph("attention_layer")

    def transpose_for_scores(input_tensor, batch_size, num_attention_heads, seq_length, width):
        output_tensor = tf.reshape(input_tensor,
                                   [batch_size, seq_length, num_attention_heads, width])
        return tf.transpose(output_tensor, [0, 2, 1, 3])

    from_shape = get_shape_list(from_tensor, expected_rank=[2, 3])
    to_shape = get_shape_list(to_tensor, expected_rank=[2, 3])

    if len(from_shape) != len(to_shape):
        raise ValueError("The rank of `from_tensor` must match the rank of `to_tensor`.")

    if len(from_shape) == 3:
        batch_size = from_shape[0]
        from_seq_length = from_shape[1]
        to_seq_length = to_shape[1]
    elif len(from_shape) == 2:
        if batch_size is None or from_seq_length is None or to_seq_length is None:
            raise ValueError(
                "When passing in rank 2 tensors to attention_layer, the values "
                "for `batch_size`, `from_seq_length`, and `to_seq_length` "
                "must all be specified.")

    # B = batch, F = from length, T = to length, N = heads, H = size per head.
    from_tensor_2d = reshape_to_matrix(from_tensor)
    to_tensor_2d = reshape_to_matrix(to_tensor)

    query_layer = _dense(from_tensor_2d, num_attention_heads * size_per_head,
                         activation=query_act, name="query",
                         kernel_initializer=create_initializer(initializer_range))
    key_layer = _dense(to_tensor_2d, num_attention_heads * size_per_head,
                       activation=key_act, name="key",
                       kernel_initializer=create_initializer(initializer_range))
    value_layer = _dense(to_tensor_2d, num_attention_heads * size_per_head,
                         activation=value_act, name="value",
                         kernel_initializer=create_initializer(initializer_range))

    query_layer = transpose_for_scores(query_layer, batch_size, num_attention_heads,
                                       from_seq_length, size_per_head)  # [B, N, F, H]
    key_layer = transpose_for_scores(key_layer, batch_size, num_attention_heads,
                                     to_seq_length, size_per_head)  # [B, N, T, H]

    attention_scores = tf.matmul(query_layer, key_layer, transpose_b=True)  # [B, N, F, T]
    attention_scores = tf.multiply(attention_scores, 1.0 / math.sqrt(float(size_per_head)))

    if attention_mask is not None:
        attention_mask = tf.expand_dims(attention_mask, axis=[1])  # [B, 1, F, T]
        # 0.0 where attended, -10000.0 where masked, added before the softmax.
        adder = (1.0 - tf.cast(attention_mask, tf.float32)) * -10000.0
        attention_scores += adder

    attention_probs = tf.nn.softmax(attention_scores)
    # Drops whole tokens to attend to, as the original Transformer does.
    attention_probs = dropout(attention_probs, attention_probs_dropout_prob)

    value_layer = tf.reshape(value_layer,
                             [batch_size, to_seq_length, num_attention_heads, size_per_head])
    value_layer = tf.transpose(value_layer, [0, 2, 1, 3])  # [B, N, T, H]

    context_layer = tf.matmul(attention_probs, value_layer)  # [B, N, F, H]
    context_layer = tf.transpose(context_layer, [0, 2, 1, 3])  # [B, F, N, H]

    if do_return_2d_tensor:
        return tf.reshape(context_layer,
                          [batch_size * from_seq_length, num_attention_heads * size_per_head])
    return tf.reshape(context_layer,
                      [batch_size, from_seq_length, num_attention_heads * size_per_head])


def transformer_model(input_tensor,
                      attention_mask=None,
                      hidden_size=768,
                      num_hidden_layers=12,
                      num_attention_heads=12,
                      intermediate_size=3072,
                      intermediate_act_fn=gelu,
                      hidden_dropout_prob=0.1,
                      attention_probs_dropout_prob=0.1,
                      initializer_range=0.02,
                      do_return_all_layers=False):
    """The stack of post-LayerNorm Transformer encoder layers (`layer_0`, `layer_1`, ... in the
    current variable scope).

    `input_tensor` [batch, seq, hidden_size]; `attention_mask` [batch, seq, seq] of 1/0.
    Returns the last layer [batch, seq, hidden_size], or the list of every layer's output with
    `do_return_all_layers`. Raises ValueError when `num_attention_heads` does not divide
    `hidden_size` or the input width is not `hidden_size`.
    """
    _require_graph("transformer_model")
    if hidden_size % num_attention_heads != 0:
        raise ValueError(
            "The hidden size (%d) is not a multiple of the number of attention "
            "heads (%d)" % (hidden_size, num_attention_heads))

    attention_head_size = int(hidden_size / num_attention_heads)
    input_shape = get_shape_list(input_tensor, expected_rank=3)
    batch_size = input_shape[0]
    seq_length = input_shape[1]
    input_width = input_shape[2]

    # Residual sums need the input as wide as the hidden layers.
    if input_width != hidden_size:
        raise ValueError("The width of the input tensor (%d) != hidden size (%d)" %
                         (input_width, hidden_size))

    # Kept as a 2-D [batch * seq, hidden] tensor between layers.
    prev_output = reshape_to_matrix(input_tensor)

    all_layer_outputs = []
    for layer_idx in range(num_hidden_layers):
        with tf.compat.v1.variable_scope("layer_%d" % layer_idx):
            layer_input = prev_output

            with tf.compat.v1.variable_scope("attention"):
                with tf.compat.v1.variable_scope("self"):
                    attention_output = attention_layer(
                        from_tensor=layer_input,
                        to_tensor=layer_input,
                        attention_mask=attention_mask,
                        num_attention_heads=num_attention_heads,
                        size_per_head=attention_head_size,
                        attention_probs_dropout_prob=attention_probs_dropout_prob,
                        initializer_range=initializer_range,
                        do_return_2d_tensor=True,
                        batch_size=batch_size,
                        from_seq_length=seq_length,
                        to_seq_length=seq_length)

                # Projection back to hidden_size, dropout, residual, LayerNorm.
                with tf.compat.v1.variable_scope("output"):
                    attention_output = _dense(
                        attention_output, hidden_size,
                        kernel_initializer=create_initializer(initializer_range))
                    attention_output = dropout(attention_output, hidden_dropout_prob)
                    attention_output = layer_norm(attention_output + layer_input)

            # The activation is applied to the intermediate (feed-forward) layer only.
            with tf.compat.v1.variable_scope("intermediate"):
                intermediate_output = _dense(
                    attention_output, intermediate_size, activation=intermediate_act_fn,
                    kernel_initializer=create_initializer(initializer_range))

            with tf.compat.v1.variable_scope("output"):
                layer_output = _dense(
                    intermediate_output, hidden_size,
                    kernel_initializer=create_initializer(initializer_range))
                layer_output = dropout(layer_output, hidden_dropout_prob)
                layer_output = layer_norm(layer_output + attention_output)
                prev_output = layer_output
                all_layer_outputs.append(layer_output)

    if do_return_all_layers:
        return [reshape_from_matrix(layer_output, input_shape)
                for layer_output in all_layer_outputs]
    return reshape_from_matrix(prev_output, input_shape)


def _name_of(tensor):
    try:
        return tensor.name
    except AttributeError:  # eager tensors have no name
        return "<eager tensor>"


def get_shape_list(tensor, expected_rank=None, name=None):
    """The shape of `tensor` as a list: static dimensions as Python ints, the unknown ones as
    scalar tensors (`tf.shape(tensor)[i]`). With `expected_rank` (int or list of ints), a
    different rank raises ValueError (see `assert_rank`)."""
    if name is None:
        name = _name_of(tensor)

    if expected_rank is not None:
        assert_rank(tensor, expected_rank, name)

    shape = tensor.shape.as_list()
    non_static_indexes = [index for index, dim in enumerate(shape) if dim is None]
    if not non_static_indexes:
        return shape

    dyn_shape = tf.shape(tensor)
    for index in non_static_indexes:
        shape[index] = dyn_shape[index]
    return shape


def reshape_to_matrix(input_tensor):
    """Reshapes a tensor of rank >= 2 to [-1, last dim]; rank 2 is returned as is; rank < 2
    raises ValueError."""
    ndims = input_tensor.shape.ndims
    if ndims < 2:
        raise ValueError("Input tensor must have at least rank 2. Shape = %s" %
                         (input_tensor.shape))
    if ndims == 2:
        return input_tensor

    width = input_tensor.shape[-1]
    return tf.reshape(input_tensor, [-1, width])


def reshape_from_matrix(output_tensor, orig_shape_list):
    """Reshapes a rank-2 tensor back to `orig_shape_list[:-1] + [its last dim]` (unchanged when
    `orig_shape_list` has 2 entries)."""
    if len(orig_shape_list) == 2:
        return output_tensor

    output_shape = get_shape_list(output_tensor)
    orig_dims = orig_shape_list[0:-1]
    width = output_shape[-1]
    return tf.reshape(output_tensor, orig_dims + [width])


def assert_rank(tensor, expected_rank, name=None):
    """Raises ValueError naming the tensor, the variable scope, the actual and the expected rank
    when the rank of `tensor` is not `expected_rank` (an int or a list of ints)."""
    if name is None:
        name = _name_of(tensor)

    if isinstance(expected_rank, numbers.Integral):
        expected_ranks = {expected_rank}
    else:
        expected_ranks = set(expected_rank)

    actual_rank = tensor.shape.ndims
    if actual_rank not in expected_ranks:
        scope_name = tf.compat.v1.get_variable_scope().name
        raise ValueError(
            "For the tensor `%s` in scope `%s`, the actual rank "
            "`%s` (shape = %s) is not equal to the expected rank `%s`" %
            (name, scope_name, actual_rank, str(tensor.shape), str(expected_rank)))
