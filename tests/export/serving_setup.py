"""Constants shared by the serving tests (conftest.py builds the exports with them)."""
SEQ_LENGTH = 16
NER_LABELS = ["O", "B-PER", "I-PER"]
CLASSIFIER_LABELS = ["negative", "positive"]
