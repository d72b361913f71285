"""The original google-research/bert Python modules' API on TensorFlow 2.

Code written against the original release switches by changing its imports only::

    import tensorflow.compat.v1 as tf
    tf.disable_v2_behavior()                  # or build inside `with tf.Graph().as_default():`
    from bert_tf.original import modeling, optimization, tokenization

* `modeling`: `BertConfig`, `BertModel` and the module functions (`transformer_model`,
  `attention_layer`, `get_assignment_map_from_checkpoint`, `get_shape_list`, ...), with the
  original's signatures, defaults and variable names (`bert/embeddings/word_embeddings`,
  `bert/encoder/layer_0/attention/self/query/kernel`, ...), built as a `tf.compat.v1` graph, so
  `tf.compat.v1.train.init_from_checkpoint` loads Google's checkpoints and
  `tf.compat.v1.train.Saver` writes them. The numbers are bert_tf's (same ops, the same 1e-5 to
  the original's outputs as `bert_tf.modeling`).
* `optimization`: `create_optimizer` and `AdamWeightDecayOptimizer` (a
  `tf.compat.v1.train.Optimizer`, slots `<var>/adam_m`, `<var>/adam_v`).
* `tokenization`: bert_tf's tokenizer (`bert_tf.tokenization`), which already is the original's.

Graph mode and eager mode: the names that create variables (`BertModel`, `embedding_lookup`,
`embedding_postprocessor`, `layer_norm`, `layer_norm_and_dropout`, `attention_layer`,
`transformer_model`, `create_optimizer`, `AdamWeightDecayOptimizer.apply_gradients`) build a
TF1 graph, as the original did: called eagerly they raise one `RuntimeError` saying so (eager
`tf.compat.v1.get_variable` would make fresh random variables at every call, silently). The
others also work on eager tensors: `BertConfig`, `gelu`, `get_activation`, `dropout`,
`create_initializer`, `create_attention_mask_from_input_mask`, `get_shape_list`,
`reshape_to_matrix`, `reshape_from_matrix`, `assert_rank`, `get_assignment_map_from_checkpoint`.
For eager / Keras code use `bert_tf.modeling.BertEncoder`, which loads the same checkpoints.

docs/switching.md lists every public name of the original's three modules and its counterpart.
"""
