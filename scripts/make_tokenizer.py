"""Write a local Hugging Face tokenizer that counts tokens as the mock servers do.

The mock engines count one token per word (`\\w+`) and one per other non-space character
(zcube_lab/serving/textgen.py). Load tools (GuideLLM, inference-perf, AIPerf, `vllm bench serve`)
want a Hugging Face tokenizer to size synthetic prompts, and this machine cannot download one. This
script builds a word-level tokenizer with the same split: lower-cased words and single
punctuation marks, one token each, over a vocabulary of the mock's output words, ASCII
punctuation, the numbers 0-999, Faker's English word list when Faker is installed (GuideLLM's
synthetic prompts are Faker text) and every word of the `--words` files. A word outside the
vocabulary is `[UNK]`: one token, which decodes to the text `[UNK]` (three tokens for the mock)
unless special tokens are skipped, so a tool that decodes windows of its own corpus
(inference-perf, AIPerf) sends longer prompts than it asked for. Give the corpus a tool prompts
with as `--words`.

Run it with the load tool's own Python (it needs `tokenizers` and `transformers`, which the lab
does not):

    /path/to/tool-venv/bin/python scripts/make_tokenizer.py /tmp/zcube-tokenizer
"""

from __future__ import annotations

import argparse
import re
import string
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UNK = "[UNK]"
# The mock's counting rule (zcube_lab.serving.textgen), applied after lower-casing.
TOKEN_RE = r"\w+|[^\w\s]"


def faker_words() -> list[str]:
    """Faker's English lorem word list, or nothing when Faker is not installed."""
    try:
        from faker.providers.lorem.en_US import Provider
    except ImportError:
        return []
    return list(Provider.word_list)


def vocabulary(extra_texts: Iterable[str]) -> list[str]:
    """Every token the tokenizer knows, `[UNK]` first, each once, in a stable order."""
    sys.path.insert(0, str(ROOT))
    from zcube_lab.serving.textgen import VOCABULARY

    words = [*VOCABULARY, *string.punctuation, *map(str, range(1000)), *faker_words()]
    for text in extra_texts:
        words.extend(re.findall(TOKEN_RE, text))
    seen: dict[str, None] = {UNK: None}
    for w in words:
        seen.setdefault(w.lower(), None)
    return list(seen)


def build(out: Path, extra_texts: Iterable[str]) -> int:
    """Save the tokenizer under `out` (tokenizer.json and its config); returns its size."""
    from tokenizers import Regex, Tokenizer, normalizers, pre_tokenizers
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(vocabulary(extra_texts))}
    tok = Tokenizer(WordLevel(vocab, unk_token=UNK))
    tok.normalizer = normalizers.Lowercase()
    # Keep the matches (words, single marks); drop what lies between them (whitespace).
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(TOKEN_RE), behavior="removed", invert=True)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=UNK, model_max_length=1 << 20)
    fast.save_pretrained(str(out))
    return len(vocab)


def main(argv: Sequence[str] | None = None) -> int:
    """Build the tokenizer directory."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="directory to write (created)")
    p.add_argument("--words", type=Path, action="append", default=[], help="text file to learn")
    args = p.parse_args(argv)
    size = build(args.out, (f.read_text(errors="replace") for f in args.words))
    print(f"wrote {args.out} ({size} tokens)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
