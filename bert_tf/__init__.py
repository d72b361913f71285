"""bert_tf: BERT (Devlin et al., 2018) in TensorFlow 2 / Keras 3, faithful to google-research/bert.

Subpackages:
  modeling       BertConfig, layers (embeddings, attention, transformer block), the encoder, heads.
  tokenization   FullTokenizer & co (the original's API), the in-graph tokenizer, vocab building.
  checkpoints    original TF1 variable names <-> Keras variables; Hugging Face safetensors.
  pretraining    pretraining-data generation and the TFRecord reader.
  evaluation     official metrics (GLUE, SQuAD v1.1/v2.0, conlleval).
"""

__version__ = "0.1.0"
