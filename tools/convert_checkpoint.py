"""Convert BERT weights between formats (Hugging Face -> original TF1 checkpoint, or re-write
an original-format checkpoint).

  python tools/convert_checkpoint.py --direction=hf_to_original \
      --input=path/to/hf_model_dir --output=out/bert_model.ckpt

The tool is `bert_tf.cli.convert_checkpoint` (console script `bert-tf-convert-checkpoint`); see docs/cli.md.
"""
from bert_tf.cli.convert_checkpoint import main

if __name__ == "__main__":
    main()
