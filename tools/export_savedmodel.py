"""Export BERT or GPT-1 as a SavedModel for fine-tuning (encoder) or TF Serving.

  python tools/export_savedmodel.py --model_type=classifier \
    --bert_config_file=$MODEL/bert_config.json --init_checkpoint=$OUT/model.ckpt-1000 \
    --vocab_file=$MODEL/vocab.txt --seq_length=128 --label_list=negative,positive \
    --export_dir=/models/sentiment --version=1

  python tools/export_savedmodel.py --model_type=gpt_lm --gpt_config_file=$GPT/gpt_config.json \
    --init_checkpoint=$GPT/model --export_dir=/models/gpt_lm

  python tools/export_savedmodel.py --model_type=gpt_classifier --gpt_task=similarity \
    --gpt_config_file=$GPT/gpt_config.json --init_checkpoint=$OUT/mrpc \
    --encoder_path=$GPT/encoder_bpe_40000.json --bpe_path=$GPT/vocab_40000.bpe \
    --label_list=0,1 --seq_length=128 --export_dir=/models/gpt_mrpc

See docs/serving.md.

The tool is `bert_tf.cli.export_savedmodel` (console script `bert-tf-export-savedmodel`); see docs/cli.md.
"""
from bert_tf.cli.export_savedmodel import main

if __name__ == "__main__":
    main()
