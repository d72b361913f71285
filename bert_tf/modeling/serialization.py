"""What the bert_tf layers and models share to round-trip through Keras' `.keras` format.

Every layer and model of `bert_tf.modeling` is registered with
`keras.saving.register_keras_serializable(package="bert_tf")` and has `get_config`/`from_config`;
its `BertConfig` travels inside its Keras config as the original `bert_config.json` dict (under
the key `"config"`, unknown fields included), and a model's encoder as a nested serialized layer.
So `model.save("m.keras")` and `keras.models.load_model("m.keras")` work in a fresh process once
the classes are registered, which importing their modules does: `import bert_tf.modeling` (and
`bert_tf.tasks.feature_based` for `FeatureBasedTagger`, `bert_tf.export` for
`SavedModelEncoderLayer`), as `import keras_hub` does for keras-hub's. (`import bert_tf` alone
stays light and registers nothing; `bert_tf.from_pretrained("m.keras")` imports what it needs.)

`DummyBatchBuilt` is the mixin of the top-level models: they create their variables by running a
dummy batch (`build_from_config_shapes`), which `build_from_config` repeats on load, and they save
the state of every dropout random stream (Keras `SeedGenerator`s, which `.keras` files otherwise
leave out) so that training after a reload draws the same dropout masks as without it.
"""
from __future__ import annotations

import warnings
from typing import Any, Mapping

import keras

from bert_tf.modeling.config import BertConfig

SERIALIZATION_PACKAGE = "bert_tf"
_SEED_STATE_PREFIX = "seed_state_"


def register(cls):
    """`keras.saving.register_keras_serializable(package="bert_tf")` (registered name
    `bert_tf>ClassName`)."""
    return keras.saving.register_keras_serializable(package=SERIALIZATION_PACKAGE)(cls)


def bert_config_from_saved(value: BertConfig | Mapping[str, Any]) -> BertConfig:
    """The `BertConfig` of a saved Keras config (a dict with the original JSON keys).

    The unknown-field warning of `BertConfig.from_dict` was given when the config was first read;
    it is not repeated on every load. Not strict: a file saved before near misses of a field
    became an error (`BertConfig.from_dict`) holds the weights its config built, and loads.
    """
    if isinstance(value, BertConfig):
        return value
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return BertConfig.from_dict(value, source="the Keras config's 'config' entry",
                                    strict=False)


def init_kwargs_from_saved(config: Mapping[str, Any]) -> dict[str, Any]:
    """Constructor kwargs from a saved Keras config: `config` back to a `BertConfig`, a nested
    serialized `encoder` back to a layer (None stays None)."""
    kwargs = dict(config)
    if "config" in kwargs:
        kwargs["config"] = bert_config_from_saved(kwargs["config"])
    if kwargs.get("encoder") is not None and isinstance(kwargs["encoder"], Mapping):
        # Left unbuilt: the model builds it under its own name scope, so that the variable
        # paths (`bert_classifier/bert/...`) are those of the model that was saved.
        encoder = {k: v for k, v in kwargs["encoder"].items() if k != "build_config"}
        kwargs["encoder"] = keras.saving.deserialize_keras_object(encoder)
    return kwargs


def seed_states(layer: keras.layers.Layer) -> list[keras.Variable]:
    """The state variables ([seed, counter]) of every random stream under `layer`, in the
    deterministic order of `layer.variables` (which lists them; `layer.weights` does not)."""
    weight_ids = {id(w) for w in layer.weights}
    return [v for v in layer.variables if id(v) not in weight_ids]


class DummyBatchBuilt:
    """Mixin for the bert_tf `keras.Model`s (list it before `keras.Model`).

    Requires `build_from_config_shapes()` (creates every variable by running a dummy batch).
    """

    def get_build_config(self) -> dict | None:
        return {"dummy_batch": True} if self.built else None

    def build_from_config(self, build_config: dict | None) -> None:
        if build_config and not self.built:
            self.build_from_config_shapes()

    def save_own_variables(self, store) -> None:
        super().save_own_variables(store)
        for i, state in enumerate(seed_states(self)):
            store[f"{_SEED_STATE_PREFIX}{i}"] = state

    def load_own_variables(self, store) -> None:
        keys = list(store.keys())
        own = {k: store[k] for k in keys if not k.startswith(_SEED_STATE_PREFIX)}
        super().load_own_variables(own)
        states = seed_states(self)
        saved = [k for k in keys if k.startswith(_SEED_STATE_PREFIX)]
        if saved and len(saved) != len(states):
            raise ValueError(f"{self.name}: the file holds {len(saved)} dropout random states, "
                             f"the model has {len(states)}")
        for i, state in enumerate(states if saved else ()):
            state.assign(store[f"{_SEED_STATE_PREFIX}{i}"])
