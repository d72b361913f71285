"""GPT-1 (Radford et al., 2018) beside BERT, faithful to openai/finetune-transformer-lm.

This package is the GPT-1 model (config, layers, heads, losses, input transformations), as
`bert_tf.modeling` is BERT's. The family's other parts live in the stages that own them for both
families (tokenization.gpt_*, checkpoints.openai, pretraining_data.gpt_lm, training.openai_adam,
export.gpt, tasks.gpt_classifier, runs.gpt_pretraining); their names are served here too, lazily.

Names are served lazily (PEP 562): importing `bert_tf.gpt` imports neither TensorFlow nor
ftfy/spaCy.
"""
from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    # The original BPE text encoder and the WordPiece alternative (tokenization.gpt_*).
    "TextEncoder": "bert_tf.tokenization.gpt_text_encoder",
    "WordPieceTextEncoder": "bert_tf.tokenization.gpt_text_encoder",
    "text_standardize": "bert_tf.tokenization.gpt_text_encoder",
    "BpeFileError": "bert_tf.tokenization.gpt_bpe",
    "InGraphBpeEncoder": "bert_tf.tokenization.gpt_bpe_in_graph",
    # LM pretraining data: contiguous n_ctx windows (pretraining_data.gpt_lm).
    "EncoderSpec": "bert_tf.pretraining_data.gpt_lm",
    "LmDataOptions": "bert_tf.pretraining_data.gpt_lm",
    "create_gpt_lm_data": "bert_tf.pretraining_data.gpt_lm",
    "lm_dataset": "bert_tf.pretraining_data.gpt_lm",
    # The model, its original parameter files and optimizer.
    "GptConfig": "bert_tf.gpt.config",
    "GptConfigError": "bert_tf.gpt.config",
    "GptModel": "bert_tf.gpt.model",
    "GptInputError": "bert_tf.gpt.model",
    "original_inputs": "bert_tf.gpt.model",
    "GptEmbedding": "bert_tf.gpt.embeddings",
    "GptBlock": "bert_tf.gpt.block",
    "GptAttention": "bert_tf.gpt.attention",
    "GptClassifierHead": "bert_tf.gpt.heads",
    "GptDropout": "bert_tf.gpt.dropout",
    "injected_keep_masks": "bert_tf.gpt.dropout",
    "OriginalParamsError": "bert_tf.checkpoints.openai",
    "load_original_params": "bert_tf.checkpoints.openai",
    "save_original_params": "bert_tf.checkpoints.openai",
    "read_original_param_files": "bert_tf.checkpoints.openai",
    "write_original_param_files": "bert_tf.checkpoints.openai",
    "original_params_to_keras": "bert_tf.checkpoints.openai",
    "keras_to_original_params": "bert_tf.checkpoints.openai",
    "OpenAIAdam": "bert_tf.training.openai_adam",
    "warmup_cosine": "bert_tf.training.openai_adam",
    "warmup_constant": "bert_tf.training.openai_adam",
    "warmup_linear": "bert_tf.training.openai_adam",
    "GptClassifier": "bert_tf.gpt.task_model",
    "SpecialTokens": "bert_tf.gpt.input_transforms",
    "InputTransformError": "bert_tf.gpt.input_transforms",
    "classification_inputs": "bert_tf.gpt.input_transforms",
    "entailment_inputs": "bert_tf.gpt.input_transforms",
    "similarity_inputs": "bert_tf.gpt.input_transforms",
    "multiple_choice_inputs": "bert_tf.gpt.input_transforms",
    # LM pretraining with the BERT pretraining loop (runs.gpt_pretraining).
    "GptTrainerOptions": "bert_tf.runs.gpt_pretraining",
    "GptPretrainingTrainer": "bert_tf.runs.gpt_pretraining",
    "GptPretrainingRun": "bert_tf.runs.gpt_pretraining",
    "run_gpt_pretraining": "bert_tf.runs.gpt_pretraining",
    "load_gpt_weights": "bert_tf.runs.gpt_pretraining",
    # Fine-tuning through the shared task readers, metrics and loop (tasks.gpt_classifier).
    "GptClassifierRunOptions": "bert_tf.tasks.gpt_classifier",
    "GptTaskDataError": "bert_tf.tasks.gpt_classifier",
    "run_gpt_classifier": "bert_tf.tasks.gpt_classifier",
    "read_rocstories": "bert_tf.tasks.gpt_classifier",
    # Serving exports (export.gpt).
    "export_gpt_lm_savedmodel": "bert_tf.export.gpt",
    "export_gpt_classifier_savedmodel": "bert_tf.export.gpt",
}

__all__ = [*_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
