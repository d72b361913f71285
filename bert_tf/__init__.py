"""bert_tf: BERT (Devlin et al., 2018) in TensorFlow 2 / Keras 3, faithful to google-research/bert.

    import bert_tf
    model, tokenizer = bert_tf.from_pretrained("path/to/uncased_L-12_H-768_A-12")

Stages own both model families (docs/architecture.md is the map, bottom to top):
  tokenization       WordPiece (FullTokenizer & co, the original's API; in-graph; vocab building;
                     packing) and GPT-1's BPE TextEncoder (ftfy + spaCy + BPE; in-graph).
  modeling           BERT: BertConfig, layers, the encoder, heads, pretraining and task models.
  gpt                GPT-1: GptConfig, the causal decoder, tied LM head, classifier head, losses,
                     the paper's input transformations.
  checkpoints        Google's TF1 variable names, Hugging Face safetensors, OpenAI params_*.npy.
  pretraining_data   BERT examples (faithful and scalable), GPT-1 LM windows, TFRecord readers.
  evaluation         official metrics (GLUE, SQuAD v1.1/v2.0, conlleval).
  training           the optimizers (AdamWeightDecay, LAMB, OpenAIAdam), schedules, strategies,
                     mixed precision, the pretraining and fine-tuning loops.
  original           the original's `modeling`, `optimization`, `tokenization` modules on
                     tf.compat.v1 (code written against google-research/bert runs unchanged).
  export             SavedModels of every kind (encoder, preprocessor, BERT and GPT-1 task
                     models) with serving checks.
  tasks              task drivers: GLUE/XNLI/IMDb, SQuAD, NER, SWAG, GPT-1 classifier, feature
                     extraction and feature-based heads, TFDS sources.
  runs               the pretraining drivers (BERT, GPT-1).
  quickstart         the offline end-to-end job (tools/quickstart.py).
  studies            the papers' ablations (tools/run_study.py).
  cli                the command-line tools' options and entry points (tools/*.py).

Top-level names (imported on first use, so `import bert_tf` does not import TensorFlow):
  from_pretrained    a model and its tokenizer from Google's release folder, a Hugging Face
                     folder, a bert_tf `.keras` file or encoder SavedModel, or a preset name.
  list_presets       the preset names (the published configs of official_configs/models/).
  GptCausalLM        GPT-1 as a language model: from_pretrained (OpenAI's released folder, the
                     preset "openai-gpt"), generate (greedy, sampling, beam; KV cache), score.
  BertTextClassifier, BertTextEmbedder, BertTextTokenClassifier, BertQuestionAnswerer,
  BertTextPreprocessor, GptTextClassifier
                     raw-text Keras task models with their tokenizer inside (docs/text_models.md).

`import bert_tf` also makes bert_tf's Keras classes known to `keras.models.load_model` without
importing Keras (bert_tf.tasks.text_models.registration).
"""

__version__ = "0.1.0"

from bert_tf import cpu_setup as _cpu_setup  # before TensorFlow loads: its oneDNN kernels

_cpu_setup.use_onednn_kernels()  # on x86-64 CPUs with AVX2 (TF_ENABLE_ONEDNN_OPTS=0: not)

from bert_tf import moved_modules as _moved_modules  # old module paths still import (CHANGELOG)

_moved_modules.install()

from bert_tf.tasks.text_models import registration as _registration  # noqa: E402

_registration.install()  # registration: `keras.models.load_model` finds bert_tf's classes

__all__ = ["from_pretrained", "list_presets", "GptCausalLM", "BertTextClassifier",
           "BertTextEmbedder", "BertTextPreprocessor", "BertTextTokenClassifier",
           "BertQuestionAnswerer", "GptTextClassifier"]

_LAZY = {"from_pretrained": ("bert_tf.pretrained", "from_pretrained"),
         "list_presets": ("bert_tf.presets", "list_presets"),
         "GptCausalLM": ("bert_tf.tasks.gpt_causal_lm", "GptCausalLM"),
         "BertTextClassifier": ("bert_tf.tasks.text_models.text_classifier",
                                "BertTextClassifier"),
         "BertTextEmbedder": ("bert_tf.tasks.text_models.text_embedder", "BertTextEmbedder"),
         "BertTextPreprocessor": ("bert_tf.tasks.text_models.preprocessors",
                                  "BertTextPreprocessor"),
         "BertTextTokenClassifier": ("bert_tf.tasks.text_models.token_classifier",
                                     "BertTextTokenClassifier"),
         "BertQuestionAnswerer": ("bert_tf.tasks.text_models.question_answerer",
                                  "BertQuestionAnswerer"),
         "GptTextClassifier": ("bert_tf.tasks.text_models.gpt_text_classifier",
                               "GptTextClassifier")}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attribute = _LAZY[name]
        value = getattr(importlib.import_module(module), attribute)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'bert_tf' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_LAZY))
