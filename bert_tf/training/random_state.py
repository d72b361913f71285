"""The random state training consumes, as one trackable for the training checkpoint.

Keras keeps each dropout layer's random stream in a `keras.random.SeedGenerator`, whose state is a
variable `[seed, counter]` that every training call advances. `tf.train.Checkpoint(model=...)`
does not see those variables (a SeedGenerator is not a trackable), so a restarted run would draw
its dropout masks from the start of the streams again and diverge from the uninterrupted run.
`training_random_state(model)` collects every SeedGenerator of a model under stable names (the
attribute path from the model, e.g. `encoder.transformer_layers.0.attention.dropout`, not the
process-wide counter Keras names them by), so

    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer,
                                     random_state=training_random_state(model))

saves and restores the streams with the weights: a resume is bit-identical to the uninterrupted
run on one device.

Per replica: under a tf.distribute strategy the state variables are mirrored (every replica
advances its copy identically) and `BertDropout` / `bert_tf.gpt.dropout.GptDropout` on replica
r draws its slice of the mask one device would draw for the whole global batch, so each replica
has its own stream and every replica's stream is a function of the checkpointed state and its
replica id: restoring the state restores all of them, whatever the number of replicas was when
it was saved. (A plain `keras.layers.Dropout` draws the same stream on every replica, as does
GPT-1's embedding-table dropout on purpose: one table, one mask; their states are checkpointed
all the same.)

Other random streams of training: the input order is seeded and re-created on resume by skipping
the consumed batches (see `PretrainingTrainer.train`); weight initialisation happens once, before
the first checkpoint.
"""
from __future__ import annotations

import keras
import tensorflow as tf

from bert_tf.errors import UserInputError
from bert_tf.training.distribution import tf_variable

_SeedGenerator = keras.random.SeedGenerator


def seed_generators(model: keras.layers.Layer) -> dict[str, _SeedGenerator]:
    """Every SeedGenerator reachable from `model` through public attributes, by attribute path.

    Names are the attribute path from `model` joined by "." (list items by index), in a stable
    order; a generator reachable by several paths is listed once, under the first.
    """
    found: dict[str, _SeedGenerator] = {}
    seen: set[int] = set()

    def visit(obj, path: str) -> None:
        if id(obj) in seen:
            return
        if isinstance(obj, _SeedGenerator):
            seen.add(id(obj))
            found[path] = obj
        elif isinstance(obj, keras.layers.Layer):
            seen.add(id(obj))
            for name in sorted(vars(obj)):
                if not name.startswith("_"):
                    visit(vars(obj)[name], f"{path}.{name}" if path else name)
            # Generators Keras tracks without a public attribute (e.g. in a private helper).
            for i, gen in enumerate(getattr(obj, "_seed_generators", ()) or ()):
                visit(gen, f"{path}._seed_generators.{i}" if path else f"_seed_generators.{i}")
        elif isinstance(obj, (list, tuple)):
            for i, item in enumerate(obj):
                visit(item, f"{path}.{i}")
        elif isinstance(obj, dict):
            for key in sorted(obj, key=str):
                visit(obj[key], f"{path}.{key}")

    visit(model, "")
    return found


def training_random_state(model: keras.layers.Layer) -> tf.train.Checkpoint:
    """A trackable holding the state variable ([seed, counter], int) of every SeedGenerator of
    `model` (see `seed_generators` for the names), to add to a training checkpoint:
    `tf.train.Checkpoint(..., random_state=training_random_state(model))`.

    Build the model (and create it under the strategy's scope) first: the variables tracked are
    the ones that exist now.
    """
    states = {name: gen.state for name, gen in seed_generators(model).items()}
    return tf.train.Checkpoint(**{name: tf_variable(v) for name, v in states.items()})


def checkpoint_has_random_state(checkpoint_prefix: str, key: str = "random_state") -> bool:
    """True when the checkpoint at `checkpoint_prefix` holds an object graph child `key` (i.e.
    was written with `training_random_state`); older checkpoints do not."""
    try:
        names = [n for n, _ in tf.train.list_variables(checkpoint_prefix)]
    except (tf.errors.OpError, ValueError) as e:
        raise UserInputError(f"{checkpoint_prefix}: not a readable TensorFlow checkpoint "
                             f"({type(e).__name__})") from None
    return any(n == key or n.startswith(key + "/") for n in names)
