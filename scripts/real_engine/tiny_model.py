"""A tiny, deterministic Llama for the real vLLM engine: nothing downloaded.

Weights come from a seed, the BPE tokenizer is trained on a seeded word corpus
made here, and the chat template is written below: the same files on every
machine with the same torch / transformers / tokenizers (the real-engine
environment pins them). Runs inside the real-engine environment:

    python tiny_model.py OUT_DIR
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

SEED = 0
VOCAB = 4096
CONFIG = dict(
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=VOCAB,
    max_position_embeddings=8192,
    rms_norm_eps=1e-5,
    rope_theta=10000.0,
    tie_word_embeddings=False,
    torch_dtype="bfloat16",
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)
SPECIAL = ["<pad>", "<s>", "</s>", "<|user|>", "<|assistant|>", "<|system|>", "<|end|>"]
# A chat template in the shape of the common ones: role markers, one end token per turn.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{{ '<|' + m['role'] + '|>' }}{{ m['content'] if m['content'] is string else '' }}{{ '<|end|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


def corpus(n_lines: int = 20_000) -> list[str]:
    """Seeded pseudo-words from syllables: enough variety for a 4,096-token BPE vocabulary."""
    rng = random.Random(SEED)
    syll = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"] + list("aeiou")
    words = ["".join(rng.choice(syll) for _ in range(rng.randint(1, 4))) for _ in range(6000)]
    punct = [".", ",", ":", ";", "(", ")", "=", "{", "}", "_", "/", "0", "1", "2", "3", "7", "9"]
    return [
        " ".join(rng.choice(words) if rng.random() > 0.1 else rng.choice(punct) for _ in range(rng.randint(4, 24)))
        for _ in range(n_lines)
    ]


def build_tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        additional_special_tokens=SPECIAL[3:],
        model_max_length=CONFIG["max_position_embeddings"],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)


def build_weights(out: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    model = LlamaForCausalLM(LlamaConfig(**CONFIG)).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    # generation_config.json: greedy by default is not set; vLLM reads only token ids from it.


def main(out_dir: str) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    build_tokenizer(out)
    build_weights(out)
    (out / "benchcamp-model.json").write_text(json.dumps({"seed": SEED, "config": CONFIG}, indent=2, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1])
