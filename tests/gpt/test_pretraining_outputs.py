"""run_gpt_pretraining's original_params/ holds the trained special-token rows and the config:
`GptCausalLM.from_pretrained(output_dir)` rebuilds exactly the trained model (no preset sizes,
no redrawn special rows)."""
from __future__ import annotations

import numpy as np


def _trained_like_model():
    import keras

    from bert_tf.gpt.config import GptConfig
    from bert_tf.gpt.model import GptModel
    keras.utils.set_random_seed(3)
    config = GptConfig(n_vocab=50, n_special=3, n_ctx=12, n_embd=16, n_head=2, n_layer=2)
    model = GptModel(config, classifier=False)
    # rows as training leaves them: nothing train.py's draw (seed 42 or any other) would give
    table = model.embedding.we.numpy()
    table[config.n_vocab:config.first_position_id] = np.arange(
        config.n_special * config.n_embd, dtype=np.float32).reshape(config.n_special, -1) / 100
    model.embedding.we.assign(table)
    return model


def test_from_pretrained_on_a_pretraining_output_dir_reads_the_trained_rows(tmp_path):
    from bert_tf.gpt.generation import GptGenerator
    from bert_tf.runs.gpt_pretraining import (ORIGINAL_PARAMS_DIR, SPECIAL_ROWS_FILE,
                                              write_original_outputs)
    from bert_tf.tasks import gpt_causal_lm
    from bert_tf.tasks.gpt_causal_lm import GptCausalLM
    assert SPECIAL_ROWS_FILE == gpt_causal_lm.SPECIAL_ROWS_FILE
    model = _trained_like_model()
    output_dir = tmp_path / "run"
    folder = write_original_outputs(model, str(output_dir / ORIGINAL_PARAMS_DIR))
    assert (output_dir / ORIGINAL_PARAMS_DIR / SPECIAL_ROWS_FILE).exists()
    loaded = GptCausalLM.from_pretrained(str(output_dir), with_tokenizer=False,
                                         jit_compile=False)
    assert loaded.config.to_dict() == model.config.to_dict()  # not the openai-gpt preset
    np.testing.assert_array_equal(loaded.transformer.embedding.we.numpy(),
                                  model.embedding.we.numpy())
    ids = [[1, 50, 7, 3, 52]]  # specials included: their rows decide these scores
    np.testing.assert_allclose(loaded.score(ids).full_table[0],
                               GptGenerator(model, jit_compile=False).score(ids).full_table[0],
                               atol=1e-5)
    # writing again (a resumed run) replaces the files
    write_original_outputs(model, folder)
