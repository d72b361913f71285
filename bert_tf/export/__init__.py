"""SavedModel exports (the serving work extends this: preprocessor, task models, signatures)."""
from bert_tf.export.encoder import encoder_savedmodel_root, export_encoder_savedmodel

__all__ = ["encoder_savedmodel_root", "export_encoder_savedmodel"]
