#!/usr/bin/env python3
"""Writes a tiny random Llama-architecture GGUF with the `gguf` package (the
writer llama.cpp's converter uses), its tensors stored in every type arl
reads — F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 — with a small
byte-level BPE vocabulary and a chat template, so the converter's
dequantization of each type can be checked against transformers' loading of
the same file. Query/key rows are permuted as llama.cpp's converter does.

usage: make_gguf.py OUT.gguf
"""
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

out = sys.argv[1]
rng = np.random.default_rng(7)
hidden, heads, kv_heads, inter, layers = 64, 4, 2, 96, 2
head_dim = hidden // heads

# GPT-2's byte alphabet as tokens, a few merges, and two control tokens.
bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b)
        cs.append(256 + n)
        n += 1
tokens = [chr(c) for c in cs]
merges = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a"]
for m in merges:
    tokens.append(m.replace(" ", ""))
tokens += ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
types = [1] * (len(tokens) - 3) + [3, 3, 3]
vocab = 320  # rows of the embedding (more than the tokens, as real models pad)

w = gguf.GGUFWriter(out, "llama")
w.add_block_count(layers)
w.add_context_length(256)
w.add_embedding_length(hidden)
w.add_feed_forward_length(inter)
w.add_head_count(heads)
w.add_head_count_kv(kv_heads)
w.add_rope_freq_base(10000.0)
w.add_layer_norm_rms_eps(1e-5)
w.add_vocab_size(vocab)
w.add_rope_dimension_count(head_dim)
w.add_tokenizer_model("gpt2")
w.add_tokenizer_pre("smollm")
w.add_token_list(tokens)
w.add_token_types(types)
w.add_token_merges(merges)
w.add_bos_token_id(len(tokens) - 3)
w.add_eos_token_id(len(tokens) - 2)
w.add_chat_template(
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def permute(x, n_head):
    # llama.cpp's convert_hf_to_gguf.py order for Q and K.
    return x.reshape(n_head, 2, x.shape[0] // n_head // 2, *x.shape[1:]).swapaxes(1, 2).reshape(x.shape)


def add(name, arr, qtype):
    arr = arr.astype(np.float32)
    if qtype == T.F32:
        w.add_tensor(name, arr)
    elif qtype == T.F16:
        w.add_tensor(name, arr.astype(np.float16))
    else:
        q = gguf.quants.quantize(arr, qtype)
        w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)


cycle = [T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]
k = 0


def next_type():
    global k
    t = cycle[k % len(cycle)]
    k += 1
    return t


add("token_embd.weight", rng.normal(0, 0.5, (vocab, hidden)), T.Q8_0)
for i in range(layers):
    add(f"blk.{i}.attn_norm.weight", 1 + rng.normal(0, 0.1, hidden), T.F32)
    add(f"blk.{i}.attn_q.weight", permute(rng.normal(0, 0.2, (hidden, hidden)), heads), next_type())
    add(f"blk.{i}.attn_k.weight", permute(rng.normal(0, 0.2, (kv_heads * head_dim, hidden)), kv_heads), next_type())
    add(f"blk.{i}.attn_v.weight", rng.normal(0, 0.2, (kv_heads * head_dim, hidden)), next_type())
    add(f"blk.{i}.attn_output.weight", rng.normal(0, 0.2, (hidden, hidden)), next_type())
    add(f"blk.{i}.ffn_norm.weight", 1 + rng.normal(0, 0.1, hidden), T.F32)
    add(f"blk.{i}.ffn_gate.weight", rng.normal(0, 0.2, (inter, hidden)), next_type())
    add(f"blk.{i}.ffn_up.weight", rng.normal(0, 0.2, (inter, hidden)), next_type())
    add(f"blk.{i}.ffn_down.weight", rng.normal(0, 0.2, (hidden, inter)), next_type())
add("output_norm.weight", 1 + rng.normal(0, 0.1, hidden), T.F32)
add("output.weight", rng.normal(0, 0.2, (vocab, hidden)), T.BF16)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
