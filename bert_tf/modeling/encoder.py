"""`BertEncoder`: embeddings, a stack of transformer blocks and the [CLS] pooler."""
from __future__ import annotations

import difflib
from typing import Iterable, Mapping

import keras
import tensorflow as tf

from bert_tf.errors import UserInputError
from bert_tf.modeling.attention import attention_mask_adder
from bert_tf.modeling.config import BertConfig
from bert_tf.modeling.embeddings import BertEmbeddings, truncated_normal
from bert_tf.modeling.serialization import DummyBatchBuilt, init_kwargs_from_saved, register
from bert_tf.modeling.recompute import recompute_block
from bert_tf.modeling.transformer import BertTransformerBlock

# Input names follow the TF Hub BERT convention; the original's names are accepted too.
INPUT_NAMES = ("input_word_ids", "input_mask", "input_type_ids")
# The original's names (run_classifier/run_pretraining features, and `BertModel`'s arguments) ->
# the TF Hub names. `input_mask` is the same in both.
INPUT_ALIASES = {"input_ids": "input_word_ids", "segment_ids": "input_type_ids",
                 "token_type_ids": "input_type_ids"}


class ModelInputError(UserInputError):
    """A model input dict with a key the model does not take (one line naming the key, the
    nearest accepted key and every accepted one), or two keys for the same input."""

    # Raised while a tf.function is traced, AutoGraph would re-raise it as a multi-line
    # StagingError (it keeps the type of built-in errors only); this attribute makes it pass
    # through unchanged.
    ag_pass_through = True


def _accepted_description(extra_keys: Iterable[str], ignored_keys: Iterable[str]) -> str:
    text = (", ".join(INPUT_NAMES) + " (or the original's "
            + ", ".join(INPUT_ALIASES) + ")")
    extra = list(extra_keys)
    if extra:
        text += ", " + ", ".join(extra)
    ignored = list(ignored_keys)
    if ignored:
        text += " and the labels " + ", ".join(ignored) + " (not read by the model)"
    return text


@tf.autograph.experimental.do_not_convert  # plain Python on the dict's keys
def check_input_keys(inputs: Mapping, extra_keys: Iterable[str] = (),
                     ignored_keys: Iterable[str] = (), owner: str = "BertEncoder"
                     ) -> dict[str, str]:
    """Checks the keys of a model input dict (no tensor is touched: works on Keras symbolic
    inputs too); returns {canonical input name: the key that gives it}.

    Args:
      inputs: dict keyed `input_word_ids`, `input_mask`, `input_type_ids`, or the original's
        names `input_ids`, `input_mask`, `segment_ids` / `token_type_ids` (`BertModel`'s argument
        name), in any mix; `input_mask` and `input_type_ids` may be absent.
      extra_keys: other keys the caller reads itself (e.g. `masked_lm_positions`); accepted.
      ignored_keys: keys accepted and not read at all (e.g. the labels a pretraining batch holds
        beside the inputs).
      owner: how the error message names the model.

    Raises:
      ModelInputError (a UserInputError, one line): `inputs` is not a dict, a key is none of the
        above (a typo such as `segmnet_ids` is never dropped silently: the message names the
        nearest accepted key and all of them), two keys give the same input (`segment_ids` and
        `input_type_ids`), or the word ids are missing.
    """
    extra_keys, ignored_keys = tuple(extra_keys), tuple(ignored_keys)
    if not isinstance(inputs, Mapping):
        raise ModelInputError(
            f"{owner} inputs: expected a dict of int32 [batch, seq_len] tensors keyed "
            f"{_accepted_description(extra_keys, ignored_keys)}; got {type(inputs).__name__}")
    given_as: dict[str, str] = {}
    unknown = []
    for key in inputs:
        if key in extra_keys or key in ignored_keys:
            continue
        name = key if key in INPUT_NAMES else INPUT_ALIASES.get(key)
        if name is None:
            unknown.append(key)
            continue
        if name in given_as:
            raise ModelInputError(
                f"{owner} inputs: keys {given_as[name]!r} and {key!r} both give {name!r}; "
                "pass one of them")
        given_as[name] = key
    if unknown:
        accepted = (*INPUT_NAMES, *INPUT_ALIASES, *extra_keys, *ignored_keys)
        near = difflib.get_close_matches(str(unknown[0]), accepted, n=1, cutoff=0.75)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        names = ", ".join(repr(k) for k in unknown)
        raise ModelInputError(
            f"{owner} inputs: unknown key{'s' if len(unknown) > 1 else ''} {names}{hint}; "
            f"accepted keys: {_accepted_description(extra_keys, ignored_keys)}")
    if "input_word_ids" not in given_as or inputs[given_as["input_word_ids"]] is None:
        raise ModelInputError(
            f"{owner} inputs: 'input_word_ids' (or the original's 'input_ids') is missing; got "
            f"keys {sorted(map(str, inputs))}")
    return given_as


def canonical_inputs(inputs: Mapping[str, tf.Tensor], extra_keys: Iterable[str] = (),
                     ignored_keys: Iterable[str] = (), owner: str = "BertEncoder"
                     ) -> dict[str, tf.Tensor]:
    """Returns {input_word_ids, input_mask, input_type_ids} from TF Hub or original key names.

    The keys are checked by `check_input_keys` (same arguments; `ModelInputError` for a key
    that is not accepted). `input_mask` defaults to all ones and `input_type_ids` to all zeros
    when absent (or None).

    Returns:
      dict with exactly the three `INPUT_NAMES`: int tensors [batch, (num_choices,) seq_len].
    """
    given_as = check_input_keys(inputs, extra_keys, ignored_keys, owner)
    out = {name: inputs[key] for name, key in given_as.items()}
    ids = tf.convert_to_tensor(out["input_word_ids"])
    out["input_word_ids"] = ids
    if out.get("input_mask") is None:
        out["input_mask"] = tf.ones_like(ids)
    if out.get("input_type_ids") is None:
        out["input_type_ids"] = tf.zeros_like(ids)
    return {name: out[name] for name in INPUT_NAMES}


class CheckedInputs:
    """Mixin of the bert_tf BERT models (list it before `keras.Model`): `model(inputs)` checks
    the input dict's keys (`check_input_keys`, with the class's `input_extra_keys` and
    `input_ignored_keys`; the `input_required_keys` among the extra keys must be there) before
    Keras runs the call, so that a bad key is the one-line `ModelInputError` (raised inside
    `call`, Keras would wrap it in a multi-line message)."""

    input_extra_keys: tuple[str, ...] = ()
    input_required_keys: tuple[str, ...] = ()
    input_ignored_keys: tuple[str, ...] = ()

    def __call__(self, inputs, *args, **kwargs):
        owner = type(self).__name__
        check_input_keys(inputs, self.input_extra_keys, self.input_ignored_keys, owner=owner)
        missing = [k for k in self.input_required_keys if inputs.get(k) is None]
        if missing:
            raise ModelInputError(f"{owner} inputs: {', '.join(map(repr, missing))} missing; "
                                  f"got keys {sorted(map(str, inputs))}")
        return super().__call__(inputs, *args, **kwargs)


@register
class BertEncoder(CheckedInputs, DummyBatchBuilt, keras.Model):
    """The BERT network without heads (`bert/` in the original checkpoint).

    Call with a dict of int32 [batch, seq_len] tensors `input_word_ids`, `input_mask`,
    `input_type_ids` (or the original's `input_ids`, `input_mask`, `segment_ids` /
    `token_type_ids`; see `canonical_inputs`: any other key is a `ModelInputError`). Returns a
    dict:
      `embedding_output` [batch, seq_len, H]: after embeddings, LayerNorm and dropout;
      `encoder_outputs`: list of L tensors [batch, seq_len, H], the output of every block;
      `sequence_output` [batch, seq_len, H]: the last block's output;
      `pooled_output` [batch, H]: tanh(dense(sequence_output[:, 0])) — the [CLS] vector;
      `attention_probs` (only with `return_attention_probs=True`): list of L [batch, N, seq, seq].

    With `output_positions` (int [batch, P]) the last block is computed only at [CLS] and those
    positions (pretraining needs nothing else): the outputs are then `embedding_output`,
    `encoder_outputs` (the first L-1 blocks), `pooled_output`, and `sequence_output_at_positions`
    [batch, P, H], equal to gathering the full `sequence_output` at `output_positions` (up to
    float rounding; dropout draws differ). The last block's cost falls by about 1 - (P+1)/seq.
    With `pooled_only=True` the last block is computed only at [CLS] (what a classifier or a
    [CLS] embedding reads): the outputs are `embedding_output`, `encoder_outputs` (the first L-1
    blocks), `pooled_output` and `cls_output` [batch, H] (the last block's [CLS] vector, i.e.
    `sequence_output[:, 0]`), equal to the full call's up to float rounding (the last block's
    dropout masks are drawn for its [CLS] row only). The last block's work other than its keys
    and values (which still read every position) falls to 1/seq.

    `xla_gelu_in_training=True`: with `training=True`, every block's FFN GELU runs as two
    XLA-compiled elementwise kernels (`activations.gelu_xla`) and each dropout + residual +
    LayerNorm as two more (`fused.dropout_residual_layer_norm`, the dropout layers' own masks);
    same values up to rounding. Off by default so that exported training functions hold no XLA;
    the pretraining trainer turns it on.
    """

    def __init__(self, config: BertConfig, xla_gelu_in_training: bool = False, **kwargs):
        kwargs.setdefault("name", "bert")
        super().__init__(**kwargs)
        self.config = config
        self.xla_gelu_in_training = xla_gelu_in_training
        self.embeddings = BertEmbeddings(config, name="embeddings")
        self.blocks = [BertTransformerBlock(config, xla_gelu_in_training=xla_gelu_in_training,
                                            name=f"layer_{i}")
                       for i in range(config.num_hidden_layers)]
        self.pooler = keras.layers.Dense(config.hidden_size, activation="tanh",
                                         kernel_initializer=truncated_normal(config), name="pooler")
        # Training-time memory saver (`bert_tf.modeling.recompute`; not saved with the model).
        self.recompute_activations = False

    def get_config(self) -> dict:
        return {**super().get_config(), "config": self.config.to_dict(),
                "xla_gelu_in_training": self.xla_gelu_in_training}

    @classmethod
    def from_config(cls, config: dict):
        return cls(**init_kwargs_from_saved(config))

    def build(self, input_shape=None) -> None:
        h = (None, None, self.config.hidden_size)
        self.embeddings.build(None)
        for block in self.blocks:
            block.build(h)
        self.pooler.build((None, self.config.hidden_size))
        self.built = True

    def call(self, inputs: Mapping[str, tf.Tensor], training: bool | None = None,
             return_attention_probs: bool = False,
             output_positions: tf.Tensor | None = None, pooled_only: bool = False) -> dict:
        if pooled_only and output_positions is not None:
            raise ValueError("BertEncoder: pooled_only and output_positions are exclusive")
        inputs = canonical_inputs(inputs, owner=type(self).__name__)
        embedding_output = self.embeddings(inputs["input_word_ids"], inputs["input_type_ids"],
                                           training=training)
        mask_adder = attention_mask_adder(inputs["input_mask"], embedding_output.dtype)
        hidden = embedding_output
        encoder_outputs, probs = [], []
        last = len(self.blocks) - 1
        for i, block in enumerate(self.blocks):
            query_positions = None
            if output_positions is not None and i == last:
                # [CLS] (for the pooler) followed by the requested positions.
                positions = tf.cast(output_positions, tf.int32)
                query_positions = tf.concat([tf.zeros_like(positions[:, :1]), positions], axis=1)
            elif pooled_only and i == last:  # [CLS] only
                query_positions = tf.zeros([tf.shape(hidden)[0], 1], tf.int32)
            if self.recompute_activations and training and not return_attention_probs:
                hidden = recompute_block(
                    block, lambda h, m, b=block, q=query_positions: b(
                        h, m, training=True, query_positions=q), hidden, mask_adder)
            else:
                hidden = block(hidden, mask_adder, training=training,
                               return_probs=return_attention_probs,
                               query_positions=query_positions)
            if return_attention_probs:
                hidden, p = hidden
                probs.append(p)
            if query_positions is None:
                encoder_outputs.append(hidden)
        pooled_output = self.pooler(hidden[:, 0])
        outputs = {
            "embedding_output": embedding_output,
            "encoder_outputs": encoder_outputs,
            "pooled_output": pooled_output,
        }
        if output_positions is not None:
            outputs["sequence_output_at_positions"] = hidden[:, 1:]
        elif pooled_only:
            outputs["cls_output"] = hidden[:, 0]
        else:
            outputs["sequence_output"] = hidden
        if return_attention_probs:
            outputs["attention_probs"] = probs
        return outputs

    @property
    def word_embeddings(self):
        """The word embedding table [vocab_size, H] (the MLM head's tied output weights)."""
        return self.embeddings.word_embeddings

    def build_from_config_shapes(self, seq_len: int = 2) -> "BertEncoder":
        """Creates every variable by running a tiny dummy batch; returns self."""
        ids = tf.zeros([1, seq_len], tf.int32)
        self({"input_word_ids": ids, "input_mask": ids + 1, "input_type_ids": ids})
        return self
