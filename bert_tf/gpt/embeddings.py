"""The combined embedding table `we` = [tokens; special tokens; positions] and its lookup."""
from __future__ import annotations

import keras
import tensorflow as tf

from bert_tf.gpt.config import GptConfig
from bert_tf.gpt.dropout import GptDropout


@keras.saving.register_keras_serializable(package="bert_tf")
class GptEmbedding(keras.layers.Layer):
    """train.py's `we` and `embed`: one table for BPE tokens, special tokens and positions.

    Variable: `we` [n_vocab + n_special + n_ctx, n_embd], N(0, 0.02²) init. Rows 0..n_vocab-1 are
    BPE tokens, then the `n_special` special tokens, then the `n_ctx` positions.

    In training the dropout (`embd_pdrop`) is applied to the **whole table**, element-wise; the
    same dropped table feeds the token lookup, the position lookup and the tied LM head, so a
    token has the same dropout pattern wherever it occurs in the batch. `call` therefore returns
    the (dropped) table with the embeddings. There is no LayerNorm and no scaling.
    """

    def __init__(self, config: GptConfig | dict, **kwargs):
        super().__init__(**kwargs)
        self.config = config if isinstance(config, GptConfig) else GptConfig.from_dict(config)
        # One table, one mask: every replica applies the mask one device draws for the table.
        self.dropout = GptDropout(self.config.embd_pdrop, replica_sliced=False,
                                  name="embd_dropout")

    def build(self, input_shape=None) -> None:
        c = self.config
        self.we = self.add_weight(name="we", shape=(c.table_rows, c.n_embd),
                                  initializer=keras.initializers.RandomNormal(stddev=0.02))
        self.built = True

    def call(self, token_ids: tf.Tensor, position_ids: tf.Tensor,
             training: bool | None = None) -> tuple[tf.Tensor, tf.Tensor]:
        """Args: token_ids, position_ids int [..., S] (rows of `we`; positions are
        n_vocab + n_special + pos).

        Returns: (h float [..., S, n_embd] = we[token] + we[position], table float
        [table_rows, n_embd], the table after dropout, for the tied LM head).
        """
        table = self.dropout(tf.convert_to_tensor(self.we), training=training)
        h = tf.gather(table, token_ids) + tf.gather(table, position_ids)
        return h, table

    def get_config(self) -> dict:
        return {**super().get_config(), "config": self.config.to_dict()}
