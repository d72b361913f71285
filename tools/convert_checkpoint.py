"""Convert BERT weights between formats (Hugging Face -> original TF1 checkpoint, or re-write
an original-format checkpoint).

  python tools/convert_checkpoint.py --direction=hf_to_original \
      --input=path/to/hf_model_dir --output=out/bert_model.ckpt

Flags and the library call: `bert_tf.cli.convert_checkpoint` (also the console script
`bert-tf-convert-checkpoint`); `--help` lists them, `--verbose` shows TensorFlow's start-up
log and the traceback of an input error.
"""
from bert_tf.cli.convert_checkpoint import main

if __name__ == "__main__":
    main()
