"""Generate text with GPT-1 (greedy, random, top-k, top-p or beam search; KV cache).

  python tools/generate.py --model=finetune-transformer-lm/model \
    --prompt="the meaning of life is" --max_new_tokens=40 --sampler=top_p --seed=1

--model is OpenAI's params folder (params_shapes.json + params_0..9.npy with
encoder_bpe_40000.json and vocab_40000.bpe beside them), a GptCausalLM.save_pretrained folder,
a .keras file, a GPT pretraining checkpoint, or the preset openai-gpt (random weights). Prompts
come from --prompt (repeatable), --prompt_ids, or --prompt_file (one per line, or .jsonl);
results are JSON lines on --output_file (default stdout).
Flags and the library call: `bert_tf.cli.generate`; `--help` lists them.
"""
from bert_tf.cli.generate import main

if __name__ == "__main__":
    main()
