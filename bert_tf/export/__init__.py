"""SavedModel exports: the reusable encoder, the preprocessing model and task models for TF
Serving, with atomic versioned writing, a serving-compatibility check, the C-API loader harness
and REST/gRPC client helpers. See docs/serving.md."""
from bert_tf.export.encoder import (SavedModelEncoderLayer, encoder_savedmodel_root,
                                    export_encoder_savedmodel)

__all__ = ["SavedModelEncoderLayer", "encoder_savedmodel_root", "export_encoder_savedmodel"]
