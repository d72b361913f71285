"""Checkpoints: original TF1 names <-> Keras variables, and Hugging Face safetensors import."""
from bert_tf.checkpoints.huggingface import (config_from_huggingface,
                                             convert_huggingface_to_original,
                                             read_huggingface_weights)
from bert_tf.checkpoints.original import (CheckpointError, assign_from_checkpoint,
                                          checkpoint_global_step, checkpoint_variable_map,
                                          encoder_variable_map, head_variable_map,
                                          is_encoder_savedmodel, latest_checkpoint,
                                          load_encoder_savedmodel, load_original_checkpoint,
                                          read_checkpoint, remove_stale_temp_files,
                                          resolve_checkpoint_prefix, save_original_checkpoint,
                                          variable_map, write_step_checkpoint,
                                          write_tf1_checkpoint)

__all__ = [
    "CheckpointError", "assign_from_checkpoint", "checkpoint_global_step",
    "checkpoint_variable_map", "is_encoder_savedmodel", "latest_checkpoint",
    "load_encoder_savedmodel", "remove_stale_temp_files", "write_step_checkpoint",
    "config_from_huggingface", "convert_huggingface_to_original",
    "encoder_variable_map", "head_variable_map", "load_original_checkpoint", "read_checkpoint",
    "read_huggingface_weights", "resolve_checkpoint_prefix", "save_original_checkpoint",
    "variable_map", "write_tf1_checkpoint",
]
