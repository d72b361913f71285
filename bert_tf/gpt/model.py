"""`GptModel`: the GPT-1 decoder with its tied LM head and classify-token head (train.py's
`model`)."""
from __future__ import annotations

from typing import Any, Mapping

import keras
import numpy as np
import tensorflow as tf

from bert_tf.errors import UserInputError
from bert_tf.modeling.recompute import recompute_block
from bert_tf.gpt.block import GptBlock
from bert_tf.gpt.config import GptConfig
from bert_tf.gpt.dropout import GptDropout
from bert_tf.gpt.embeddings import GptEmbedding
from bert_tf.gpt.heads import GptClassifierHead, tied_lm_logits
from bert_tf.gpt import losses as gpt_losses


class GptInputError(UserInputError):
    """Model inputs that do not fit the model (e.g. longer than n_ctx)."""

    # Keras adds its "Exception encountered when calling ..." paragraph to errors raised in a
    # layer's call unless this is set: the message stays the one line naming the input.
    _keras_call_info_injected = True


def original_inputs(X: Any) -> dict[str, tf.Tensor]:
    """train.py's input layout -> this model's: X int [..., S, 2] with X[..., 0] the token ids
    and X[..., 1] the position ids (rows of `we`) -> {"token_ids", "position_ids"} [..., S]."""
    X = tf.convert_to_tensor(X)
    return {"token_ids": X[..., 0], "position_ids": X[..., 1]}


@keras.saving.register_keras_serializable(package="bert_tf")
class GptModel(keras.Model):
    """GPT-1 as train.py's `model(X, M, Y)`.

    Layers: `embedding` (the table `we`), `blocks` h0..h{n_layer-1} (post-LN), no final
    LayerNorm, the LM head tied to the whole dropped table, and (with `classifier=True`) the
    classifier `clf` read at the first `clf_token` of each sequence.

    Inputs (a dict): `token_ids` int [..., S] with S ≤ n_ctx — [B, S] single sequences or
    [B, C, S] C choices per example — and optionally `position_ids` int [..., S] (rows of `we`;
    default n_vocab + n_special + 0..S-1, as train.py fills them, padding included). There is no
    padding mask: attention is causal only, so padding must come after the real tokens; the
    loss mask is given to `compute_losses`. `original_inputs(X)` converts train.py's X[..., 2].

    Outputs (a dict): `hidden_states` float [..., S, n_embd]; `lm_logits` float
    [..., S-1, table_rows] (position i predicts token i+1); `clf_logits` float [...] without the
    last axis (one score per sequence, e.g. [B, C]) when the model has a classifier; in
    training, `lm_table` float [table_rows, n_embd], the (dropped) table the LM head reads, so
    that a loss can apply the head at the loss mask's positions only
    (`losses.masked_lm_losses`; in a traced step the unread `lm_logits` are then pruned). With
    `return_intermediates=True` also `embed_output` [..., S, n_embd], `block_outputs`
    [n_layer, ..., S, n_embd], `attention_probs` [n_layer, ..., n_head, S, S] (before attention
    dropout), `clf_h` [..., n_embd] and `clf_pool_idx` int32 [...].

    `clf_token` defaults to the last special token (train.py's `_classify_`, n_vocab + 2 for
    its 3 specials).

    Token ids must be in [0, n_vocab + n_special) (BPE tokens, then special tokens; the position
    rows that follow in `we` are not tokens). Checked where it costs nothing on the training
    step: eagerly, a `GptInputError` naming the first bad id, where it is and the range; in a
    graph with `training` falsy (inference, evaluation, serving exports), an assertion with the
    same message (compiled away under XLA). A training graph (`training=True`) adds no check.
    """

    def __init__(self, config: GptConfig | Mapping[str, Any], clf_token: int | None = None,
                 classifier: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.config = config if isinstance(config, GptConfig) else GptConfig.from_dict(config)
        c = self.config
        if clf_token is None:
            clf_token = c.n_vocab + c.n_special - 1
        self.clf_token = int(clf_token)
        self.classifier = bool(classifier)
        self.embedding = GptEmbedding(c, name="embedding")
        self.blocks = [GptBlock(c, name=f"h{layer}") for layer in range(c.n_layer)]
        # Training-time memory saver (`bert_tf.modeling.recompute`; not saved with the model).
        self.recompute_activations = False
        self.clf = (GptClassifierHead(c.n_embd, self.clf_token, c.clf_pdrop, name="clf")
                    if self.classifier else None)
        self.build()

    def build(self, input_shape=None) -> None:
        self.embedding.build()
        for block in self.blocks:
            block.build()
        if self.clf is not None:
            self.clf.build()
        self.built = True

    # ---- names and test hooks --------------------------------------------------------------
    def original_variables(self) -> list[tuple[str, keras.Variable]]:
        """(original TF name, variable) in train.py's `find_trainable_variables('model')` order:
        `model/we`, then 12 per layer, then `model/clf/w`, `model/clf/b`."""
        out = [("model/we", self.embedding.we)]
        for layer, block in enumerate(self.blocks):
            out += [(f"model/h{layer}/{name}", v) for name, v in block.original_variables()]
        if self.clf is not None:
            out += [("model/clf/w", self.clf.w), ("model/clf/b", self.clf.b)]
        return out

    def dropout_layers(self) -> dict[str, GptDropout]:
        """Every dropout, keyed by where the original applies it (`we`, `h<l>/attn_probs`,
        `h<l>/attn_resid`, `h<l>/mlp_resid`, `clf`), for `dropout.injected_keep_masks`."""
        out = {"we": self.embedding.dropout}
        for layer, block in enumerate(self.blocks):
            out[f"h{layer}/attn_probs"] = block.attn.probs_dropout
            out[f"h{layer}/attn_resid"] = block.attn.resid_dropout
            out[f"h{layer}/mlp_resid"] = block.mlp.resid_dropout
        if self.clf is not None:
            out["clf"] = self.clf.dropout
        return out

    # ---- forward ---------------------------------------------------------------------------
    def _ids(self, inputs: Mapping[str, Any]) -> tuple[tf.Tensor, tf.Tensor]:
        if not isinstance(inputs, Mapping) or "token_ids" not in inputs:
            raise GptInputError("GptModel inputs: expected a dict with 'token_ids' (and optional "
                                "'position_ids'); use original_inputs(X) for train.py's X[..., 2]")
        token_ids = tf.cast(tf.convert_to_tensor(inputs["token_ids"]), tf.int32)
        seq_len = token_ids.shape[-1]
        if seq_len is not None and seq_len > self.config.n_ctx:
            raise GptInputError(f"GptModel inputs: sequence length {seq_len} exceeds n_ctx "
                                f"{self.config.n_ctx} (the position rows of the table)")
        if inputs.get("position_ids") is not None:
            position_ids = tf.cast(tf.convert_to_tensor(inputs["position_ids"]), tf.int32)
        else:
            positions = self.config.first_position_id + tf.range(tf.shape(token_ids)[-1])
            position_ids = tf.broadcast_to(positions, tf.shape(token_ids))
        return token_ids, position_ids

    def check_token_ids(self, token_ids: tf.Tensor, training: Any = None) -> tf.Operation | None:
        """Ids outside [0, n_vocab + n_special) -> one line naming the first bad id, where it
        is and the range: raised at once (`GptInputError`) for an eager tensor; for a symbolic
        one with `training` falsy, an assertion op to run before the lookups (returned); None
        when there is nothing to check or no check is wanted (a training graph)."""
        c = self.config
        high = c.n_vocab + c.n_special
        what = (f"token ids must be in [0, {high}) (BPE tokens 0..{c.n_vocab - 1}, special "
                f"tokens {c.n_vocab}..{high - 1}; the position rows of the table are not tokens)")
        if tf.executing_eagerly():
            values = np.asarray(token_ids)
            bad = np.argwhere((values < 0) | (values >= high))
            if bad.size:
                where = tuple(int(i) for i in bad[0])
                raise GptInputError(f"GptModel inputs: token id {int(values[where])} at "
                                    f"{list(where)} is outside [0, {high}); {what}")
            return None
        if isinstance(training, bool) and training:
            return None
        flat = tf.reshape(token_ids, [-1])
        outside = tf.logical_or(flat < 0, flat >= high)
        first = tf.gather(flat, tf.argmax(tf.cast(outside, tf.int32)))  # static shapes (XLA)
        return tf.debugging.Assert(tf.logical_not(tf.reduce_any(outside)),
                                   ["GptModel inputs: token id", first,
                                    f"is outside [0, {high}); {what}"])

    def call(self, inputs: Mapping[str, Any], training: bool | None = None,
             return_intermediates: bool = False,
             with_lm_logits: bool = True) -> dict[str, tf.Tensor]:
        """See the class docstring; `with_lm_logits=False` skips the LM head (its
        [..., S-1, table_rows] matmul), e.g. for classification-only inference."""
        c = self.config
        token_ids, position_ids = self._ids(inputs)
        lead = tf.shape(token_ids)[:-1]
        seq = tf.shape(token_ids)[-1]
        checks = [self.check_token_ids(token_ids, training)]
        if token_ids.shape[-1] is None:
            checks.append(tf.debugging.assert_less_equal(
                seq, c.n_ctx, message="sequence longer than n_ctx"))
        # The check runs before the table lookups, which would otherwise fail first (in a graph,
        # at random) on a position row past the table with a less telling message.
        with tf.control_dependencies([op for op in checks if op is not None]):
            flat_tokens = tf.reshape(token_ids, [-1, seq])  # train.py's reshape to [-1, n_ctx]
            flat_positions = tf.reshape(position_ids, [-1, seq])
        h, table = self.embedding(flat_tokens, flat_positions, training=training)
        embed_output, block_outputs, probs = h, [], []
        for block in self.blocks:
            if self.recompute_activations and training and not return_intermediates:
                h = recompute_block(block, lambda x, b=block: b(x, training=True), h)
                continue
            h = block(h, training=training, return_probs=return_intermediates)
            if return_intermediates:
                h, p = h
                block_outputs.append(h)
                probs.append(p)

        def unflatten(x: tf.Tensor) -> tf.Tensor:
            return tf.reshape(x, tf.concat([lead, tf.shape(x)[1:]], axis=0))

        hidden = unflatten(h)
        out = {"hidden_states": hidden}
        if with_lm_logits:
            out["lm_logits"] = unflatten(tied_lm_logits(h[:, :-1], table))
        if training:
            out["lm_table"] = table
        if self.clf is not None:
            logits, clf_h, pool_idx = self.clf(hidden, token_ids, training=training)
            out["clf_logits"] = logits
        if return_intermediates:
            out["embed_output"] = unflatten(embed_output)
            out["block_outputs"] = tf.stack([unflatten(b) for b in block_outputs])
            out["attention_probs"] = tf.stack([unflatten(p) for p in probs])
            if self.clf is not None:
                out["clf_h"], out["clf_pool_idx"] = clf_h, pool_idx
        return out

    # ---- inference with a key/value cache (bert_tf.gpt.generation) -------------------------
    def empty_cache(self, batch_size: Any, cache_length: int,
                    dtype: tf.DType = tf.float32) -> list[tuple[tf.Tensor, tf.Tensor]]:
        """Zeros for `call_cached`: per block (keys, values), each float
        [batch_size·n_head, cache_length, head_size] (row n·n_head + h: example n, head h;
        `GptAttention.call_cached`)."""
        c = self.config
        shape = [batch_size * c.n_head, cache_length, c.head_size]
        return [(tf.zeros(shape, dtype), tf.zeros(shape, dtype)) for _ in self.blocks]

    def call_cached(self, token_ids: tf.Tensor, cache: list[tuple[tf.Tensor, tf.Tensor]],
                    index: Any) -> tuple[tf.Tensor, tf.Tensor, list]:
        """Eval-mode forward of the tokens at positions index..index+T-1, attending to the
        cached keys and values of the earlier positions: each new token costs one position.

        Args: token_ids int [N, T]; cache: from `empty_cache` or a previous call (one per block;
        slot s = position s; index + T <= its length <= n_ctx); index int32 [] (position of
        token_ids[:, 0]; its position id is n_vocab + n_special + index).

        Returns: (hidden float [N, T, n_embd] = `call`'s hidden_states at those positions of the
        whole prefix; the table `we` [table_rows, n_embd] for the tied LM head; the updated
        cache).
        """
        token_ids = tf.cast(token_ids, tf.int32)
        index = tf.cast(index, tf.int32)
        positions = self.config.first_position_id + index + tf.range(tf.shape(token_ids)[-1])
        h, table = self.embedding(token_ids, tf.broadcast_to(positions, tf.shape(token_ids)),
                                  training=False)
        new_cache = []
        for block, layer_cache in zip(self.blocks, cache):
            h, layer_cache = block.call_cached(h, layer_cache, index)
            new_cache.append(layer_cache)
        return h, table, new_cache

    def compute_losses(self, outputs: Mapping[str, tf.Tensor], token_ids: Any, mask: Any,
                       labels: Any = None, lm_coef: float = 0.5) -> dict[str, tf.Tensor]:
        """train.py's losses from `call`'s outputs.

        Args: token_ids int [..., S]; mask float [..., S] (1 = real token; only the LM loss uses
        it, with M[..., 1:]); labels int [B] (right choice) or None; lm_coef: weight of the
        auxiliary LM loss (0 leaves it out).

        Returns: `lm_token_losses` [..., S-1], `lm_losses` [...], and `train_loss` [] =
        mean(clf_losses) + lm_coef·mean(lm_losses) (mean(lm_losses) without labels); with labels
        also `clf_losses` [B].
        """
        token_losses = gpt_losses.lm_token_losses(outputs["lm_logits"], token_ids)
        per_sequence = gpt_losses.lm_losses(token_losses, mask)
        out = {"lm_token_losses": token_losses, "lm_losses": per_sequence}
        clf_losses = None
        if labels is not None:
            if "clf_logits" not in outputs:
                raise GptInputError("GptModel.compute_losses: labels given but the model has no "
                                    "classifier (classifier=False)")
            clf_losses = gpt_losses.classification_losses(outputs["clf_logits"], labels)
            out["clf_losses"] = clf_losses
        out["train_loss"] = gpt_losses.train_loss(clf_losses, per_sequence, lm_coef)
        return out

    def get_config(self) -> dict:
        return {"config": self.config.to_dict(), "clf_token": self.clf_token,
                "classifier": self.classifier, "name": self.name, "trainable": self.trainable}

    @classmethod
    def from_config(cls, config: dict) -> "GptModel":
        return cls(**config)
