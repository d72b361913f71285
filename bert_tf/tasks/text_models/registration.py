"""`import bert_tf` makes every bert_tf Keras class loadable by `keras.models.load_model`,
without importing Keras or TensorFlow itself (the command-line tools stay quick to start).

Keras finds a saved object's class by its registered name (`bert_tf>BertEncoder`) in its global
registry, filled by `@keras.saving.register_keras_serializable` when a module defining the
class is imported. bert_tf's package import is lazy, so after a bare `import bert_tf` none of
those modules has run. `install()` (called by `bert_tf/__init__.py`) therefore puts a light
stand-in under each registered name as soon as Keras' registry module exists: right away if Keras
is already imported, otherwise from an import hook that fires once after Keras' registry module
has been loaded. A stand-in's `from_config` imports bert_tf's modules (`register_all`), which
replace every stand-in with the real class, and then builds the real object: the first `.keras`
load pays the import, nothing else does.

`REGISTERED` lists the registered names with their modules; tests/tasks/test_text_models.py
checks that it matches what the modules register.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

__all__ = ["REGISTERED", "REGISTRY_MODULE", "install", "register_all"]

PACKAGE = "bert_tf"
REGISTRY_MODULE = "keras.src.saving.object_registration"

# module -> the class names it registers under "bert_tf>" (registration)
REGISTERED = {
    "bert_tf.modeling.embeddings": ("BertEmbeddings",),
    "bert_tf.modeling.attention": ("BertSelfAttention",),
    "bert_tf.modeling.dropout": ("BertDropout",),
    "bert_tf.modeling.transformer": ("BertTransformerBlock",),
    "bert_tf.modeling.encoder": ("BertEncoder",),
    "bert_tf.modeling.heads": ("OutputProjection", "MaskedLMHead", "NextSentenceHead",
                               "ClassificationHead", "SpanHead", "TokenClassificationHead",
                               "MultipleChoiceHead"),
    "bert_tf.modeling.models": ("BertPretrainer", "BertClassifier", "BertSpanLabeler",
                                "BertTokenClassifier", "BertMultipleChoice"),
    "bert_tf.gpt.dropout": ("GptDropout",),
    "bert_tf.gpt.layers": ("GptConv1D", "GptLayerNorm"),
    "bert_tf.gpt.embeddings": ("GptEmbedding",),
    "bert_tf.gpt.attention": ("GptAttention",),
    "bert_tf.gpt.block": ("GptMlp", "GptBlock"),
    "bert_tf.gpt.heads": ("GptClassifierHead",),
    "bert_tf.gpt.model": ("GptModel",),
    "bert_tf.gpt.task_model": ("GptClassifier",),
    "bert_tf.training.openai_adam": ("OpenAIAdam",),
    "bert_tf.export.encoder": ("SavedModelEncoderLayer",),
    "bert_tf.tasks.feature_based": ("ScalarMix", "FeatureBasedTagger"),
    "bert_tf.tasks.gpt_causal_lm": ("GptCausalLM",),
    "bert_tf.tasks.text_models.preprocessors": ("BertTextPreprocessor",),
    "bert_tf.tasks.text_models.text_classifier": ("BertTextClassifier",),
    "bert_tf.tasks.text_models.text_embedder": ("BertTextEmbedder",),
    "bert_tf.tasks.text_models.token_classifier": ("BertTextTokenClassifier",),
    "bert_tf.tasks.text_models.gpt_preprocessor": ("GptTextPreprocessor",),
    "bert_tf.tasks.text_models.gpt_text_classifier": ("GptTextClassifier",),
    "bert_tf.tasks.text_models.question_answerer": ("BertQuestionAnswerer",),
}

_installed = False


def register_all() -> None:
    """Imports every module of `REGISTERED` (registration): their decorators register the real
    classes, replacing the stand-ins."""
    for module in REGISTERED:
        importlib.import_module(module)  # registration


def _stand_in(registered_name: str) -> type:
    class StandIn:
        """Placeholder for a bert_tf class until its module is imported (module docstring)."""

        @classmethod
        def from_config(cls, config, *args, **kwargs):
            register_all()
            from keras.src.saving import object_registration

            real = object_registration.GLOBAL_CUSTOM_OBJECTS[registered_name]
            if real is cls:
                raise TypeError(f"bert_tf did not register {registered_name}")
            return real.from_config(config, *args, **kwargs)

    StandIn.__name__ = StandIn.__qualname__ = registered_name.split(">")[1]
    return StandIn


def _add_stand_ins(registry) -> None:
    for names in REGISTERED.values():
        for name in names:
            key = f"{PACKAGE}>{name}"
            if key not in registry.GLOBAL_CUSTOM_OBJECTS:  # a real class stays
                registry.GLOBAL_CUSTOM_OBJECTS[key] = _stand_in(key)


class _AfterLoad(importlib.abc.Loader):
    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _add_stand_ins(module)


class _RegistryHook(importlib.abc.MetaPathFinder):
    """Wraps the loader of Keras' registry module to add the stand-ins once it has run."""

    def find_spec(self, fullname, path, target=None):
        if fullname != REGISTRY_MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _AfterLoad(spec.loader)
        return spec


def install() -> None:
    """Makes bert_tf's classes loadable after `import bert_tf` (module docstring)."""
    global _installed
    if _installed:
        return
    _installed = True
    registry = sys.modules.get(REGISTRY_MODULE)
    if registry is not None:
        _add_stand_ins(registry)
    else:
        sys.meta_path.insert(0, _RegistryHook())
