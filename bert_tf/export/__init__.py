"""SavedModel exports: the reusable encoder, the preprocessing model and task models for TF
Serving, with atomic versioned writing, a serving-compatibility check, the C-API loader harness
and REST/gRPC client helpers. See docs/serving.md.

The encoder names below are imported lazily, so that tools can check their flags before
TensorFlow loads.
"""
__all__ = ["SavedModelEncoderLayer", "encoder_savedmodel_root", "export_encoder_savedmodel"]


def __getattr__(name: str):
    if name in __all__:
        from bert_tf.export import encoder

        return getattr(encoder, name)
    raise AttributeError(f"module 'bert_tf.export' has no attribute {name!r}")
