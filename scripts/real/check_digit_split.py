#!/usr/bin/env python3
"""Checks ids arl's tokenizer gave for number-heavy texts against a tokenizer
built with the pre-tokenizer llama.cpp uses for `tokenizer.ggml.pre = smollm`
(every digit its own piece, then GPT-2's split), from the vocabulary and
merges transformers reads out of the same GGUF. Also counts the texts on which
transformers' own GGUF tokenizer (plain byte-level: it has no `smollm` entry)
gives other ids.

usage: check_digit_split.py GGUF < cases.jsonl   (each line {"text", "ids"})
prints {"cases", "mismatches", "first_mismatch", "transformers_gguf_differs"}
"""
import json
import os
import sys

from tokenizers import pre_tokenizers
from transformers import AutoTokenizer

gguf = sys.argv[1]
hf = AutoTokenizer.from_pretrained(os.path.dirname(gguf), gguf_file=os.path.basename(gguf))
plain = hf.backend_tokenizer
reference = type(plain).from_str(plain.to_str())
reference.pre_tokenizer = pre_tokenizers.Sequence(
    [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
)
cases = [json.loads(l) for l in sys.stdin if l.strip()]
mismatches, first, differs = 0, None, 0
for c in cases:
    want = reference.encode(c["text"], add_special_tokens=False).ids
    if want != c["ids"]:
        mismatches += 1
        first = first or {"text": c["text"], "arl": c["ids"], "reference": want}
    if plain.encode(c["text"], add_special_tokens=False).ids != want:
        differs += 1
print(json.dumps({"cases": len(cases), "mismatches": mismatches, "first_mismatch": first,
                  "transformers_gguf_differs": differs}))
