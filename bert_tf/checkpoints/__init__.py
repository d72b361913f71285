"""Checkpoints: original TF1 names <-> Keras variables, and Hugging Face safetensors import."""
from bert_tf.checkpoints.huggingface import (config_from_huggingface,
                                             convert_huggingface_to_original,
                                             read_huggingface_weights)
from bert_tf.checkpoints.original import (CheckpointError, encoder_variable_map,
                                          head_variable_map, load_original_checkpoint,
                                          read_checkpoint, resolve_checkpoint_prefix,
                                          save_original_checkpoint, variable_map,
                                          write_tf1_checkpoint)

__all__ = [
    "CheckpointError", "config_from_huggingface", "convert_huggingface_to_original",
    "encoder_variable_map", "head_variable_map", "load_original_checkpoint", "read_checkpoint",
    "read_huggingface_weights", "resolve_checkpoint_prefix", "save_original_checkpoint",
    "variable_map", "write_tf1_checkpoint",
]
