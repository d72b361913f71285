"""Adapter: the matmul floor of the harness's BERT step (a bound, not an implementation).

A "model" for the side-by-side harness in /work/shared/bench-peers that performs exactly the
matrix products of bert_tf's BERT at the harness's config (the same shapes, counts and transposes
as the traced bert_tf step, forward and backward: the fused [H, 3H] QKV projection, the attention
products per head, the output projection, the FFN, the last block only at [CLS] + the masked
positions, the transform dense, the tied [V, H] output layer with its bias, the pooler and the NSP
layer), the embedding lookups and their gradients, and nothing else: no LayerNorm, no GELU, no
softmax, no dropout, no bias but the output bias, and heads split by reshape alone (no transpose).
The harness then adds what it adds for every implementation: its own cross-entropy, the
GradientTape and the optimizer (here bert_tf's `FusedAdam`, one `ResourceApplyAdam` kernel per
variable, over the same large variables: the word table, the blocks' kernels and the output bias).

Its step time is therefore a lower bound for any implementation of this model that uses
TensorFlow's CPU kernels for its matrix products: a faithful BERT computes all of these products
(and more). `bench_encoder.py --impls ...,matmul_floor` reports `matmul_floor/faster_peer`: the
highest bert_tf / faster-peer ratio that the matrix products alone leave possible in that run.

The numbers it computes are meaningless (a linear network); only its cost is of interest.
"""
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import tensorflow as tf  # noqa: E402

from bert_tf.training import FusedAdam  # noqa: E402

FRAMEWORK = "keras3"
VERSIONS: dict = {}


class _LinearBert(tf.Module):
    """The matrix products of BERT's encoder, masked-LM and NSP heads (see the module docstring).

    cfg: the harness's config dict (num_layers, hidden_size, num_heads, intermediate_size,
    vocab_size, max_position, type_vocab_size, dtype_policy).
    """

    def __init__(self, cfg: dict):
        super().__init__()
        h, i, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
        self.num_layers = cfg["num_layers"]
        self.num_heads = cfg["num_heads"]
        self.hidden = h
        self.compute_dtype = (tf.bfloat16 if cfg.get("dtype_policy") == "mixed_bfloat16"
                              else tf.float32)
        init = tf.random.stateless_truncated_normal
        seeds = iter(range(1000))

        def var(shape, name):
            return tf.Variable(init(shape, seed=[0, next(seeds)], stddev=0.02), name=name)

        self.word_embeddings = var([v, h], "word_embeddings")
        self.position_embeddings = var([cfg["max_position"], h], "position_embeddings")
        self.token_type_embeddings = var([cfg["type_vocab_size"], h], "token_type_embeddings")
        self.blocks = [dict(qkv=var([h, 3 * h], f"qkv_{n}"), out=var([h, h], f"out_{n}"),
                            up=var([h, i], f"up_{n}"), down=var([i, h], f"down_{n}"))
                       for n in range(self.num_layers)]
        self.transform = var([h, h], "transform")
        self.output_bias = tf.Variable(tf.zeros([v]), name="output_bias")
        self.pooler = var([h, h], "pooler")
        self.nsp = var([2, h], "nsp")

    def _cast(self, x: tf.Tensor) -> tf.Tensor:
        return tf.cast(x, self.compute_dtype)

    def _attention(self, q: tf.Tensor, k: tf.Tensor, v: tf.Tensor, batch: int, seq: int
                   ) -> tf.Tensor:
        """q: [batch * q_len, H]; k, v: [batch * seq, H] -> [batch * q_len, H] (heads by reshape)."""
        d = self.hidden // self.num_heads
        q4 = tf.reshape(q, [batch, self.num_heads, -1, d])
        k4 = tf.reshape(k, [batch, self.num_heads, seq, d])
        v4 = tf.reshape(v, [batch, self.num_heads, seq, d])
        scores = tf.matmul(q4, k4, transpose_b=True)  # [batch, heads, q_len, seq]
        return tf.reshape(tf.matmul(scores, v4), [-1, self.hidden])

    def encode(self, token_ids: tf.Tensor, segment_ids: tf.Tensor,
               rows: tf.Tensor | None = None) -> tf.Tensor:
        """token_ids, segment_ids: [batch, seq] -> [batch * seq, H], or with `rows` (flat row
        indices [R]) the last block only at those rows -> [R, H]."""
        batch, seq = token_ids.shape
        h = self.hidden
        x = (tf.gather(self.word_embeddings, token_ids)
             + self.position_embeddings[:seq]
             + tf.gather(self.token_type_embeddings, segment_ids))
        x = self._cast(tf.reshape(x, [-1, h]))
        for n, w in enumerate(self.blocks):
            last = n == self.num_layers - 1
            if last and rows is not None:
                kv = x @ self._cast(w["qkv"][:, h:])
                k, v = tf.split(kv, 2, axis=1)
                x = tf.gather(x, rows)
                q = x @ self._cast(w["qkv"][:, :h])
            else:
                q, k, v = tf.split(x @ self._cast(w["qkv"]), 3, axis=1)
            x = x + self._attention(q, k, v, batch, seq) @ self._cast(w["out"])
            x = x + (x @ self._cast(w["up"])) @ self._cast(w["down"])
        return x

    def pretrain_logits(self, batch: dict) -> tuple[tf.Tensor, tf.Tensor]:
        """-> masked-LM logits [batch, masked, V], NSP logits [batch, 2]."""
        token_ids = batch["token_ids"]
        b, seq = token_ids.shape
        masked = batch["mask_positions"].shape[1]
        offsets = tf.range(b)[:, None] * seq
        cls_rows = tf.range(b) * seq
        mask_rows = tf.reshape(batch["mask_positions"] + offsets, [-1])
        x = self.encode(token_ids, batch["segment_ids"], tf.concat([cls_rows, mask_rows], 0))
        cls, m = x[:b], x[b:]
        m = m @ self._cast(self.transform)
        logits = tf.matmul(m, self._cast(self.word_embeddings), transpose_b=True)
        if logits.dtype != tf.float32:  # as bert_tf's MaskedLMHead: the bias in float32
            logits = tf.cast(logits, tf.float32)
        logits = tf.nn.bias_add(logits, tf.cast(self.output_bias, logits.dtype))
        nsp = tf.matmul(cls @ self._cast(self.pooler), self._cast(self.nsp), transpose_b=True)
        return tf.reshape(logits, [b, masked, -1]), nsp


class Pretrainer:
    """The harness's pretraining interface over `_LinearBert` (MLM + NSP products)."""

    has_nsp = True

    def __init__(self, cfg):
        self.model = _LinearBert(cfg)

    def build(self, batch):
        self.model.pretrain_logits(batch)

    @property
    def trainable_variables(self):
        return list(self.model.trainable_variables)

    def logits(self, batch, training):
        return self.model.pretrain_logits(batch)

    def make_optimizer(self, lr):
        return FusedAdam(learning_rate=lr)


class Encoder:
    """The encoder's matrix products only (inference floor): (sequence rows, [CLS] pooled)."""

    def __init__(self, cfg):
        self.model = _LinearBert(cfg)

    def __call__(self, batch, training=False):
        token_ids = batch["token_ids"]
        x = self.model.encode(token_ids, batch["segment_ids"])
        seq_out = tf.reshape(x, [token_ids.shape[0], token_ids.shape[1], -1])
        return seq_out, seq_out[:, 0] @ self.model._cast(self.model.pooler)

    def count_params(self):
        return int(sum(v.shape.num_elements() for v in self.model.trainable_variables))


MATRIX_PRODUCT_OPS = ("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")


def matrix_products(graph: tf.Graph) -> dict[tuple, int]:
    """The matrix products a traced graph performs, as a count per
    (op type, dtype, left shape, right shape, transpose/adjoint flags); how this file is checked
    against bert_tf's own step (tests/test_bench_matmul_floor.py)."""
    counts: dict[tuple, int] = {}
    for op in graph.get_operations():
        if op.type not in MATRIX_PRODUCT_OPS:
            continue
        flags = tuple(bool(op.get_attr(k)) for k in (
            ("transpose_a", "transpose_b") if op.type == "MatMul" else ("adj_x", "adj_y")))
        key = (op.type, op.inputs[0].dtype.name, tuple(op.inputs[0].shape.as_list()),
               tuple(op.inputs[1].shape.as_list()), flags)
        counts[key] = counts.get(key, 0) + 1
    return counts
