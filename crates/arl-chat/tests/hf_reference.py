"""Reference outputs for arl-chat's tests on real tokenizers and templates,
from Hugging Face's own libraries (run by tests/real_tokenizer.rs and
tests/real_templates.rs with the project's virtualenv).

  hf_reference.py tokenize TOKENIZER_JSON IN_JSON OUT_JSON
      IN: {"texts": [...], "id_lists": [[...], ...]}; OUT: {"ids": the
      `tokenizers` library's ids of each text (no special tokens added),
      "decoded": its decode (special tokens kept) of each text's ids and then
      of each id list, "version"}.
  hf_reference.py chat IN_JSON OUT_JSON
      IN: [{"dir", "messages", "tools", "add_generation_prompt", "kwargs"}];
      OUT: per case {"text", "ids"} from transformers' apply_chat_template
      (tokenize=False, then tokenize=True), or {"error"}.
"""
import json
import sys


def tokenize(tokenizer_json, inp, out):
    import tokenizers

    tok = tokenizers.Tokenizer.from_file(tokenizer_json)
    req = json.load(open(inp, encoding="utf-8"))
    ids = [e.ids for e in tok.encode_batch(req["texts"], add_special_tokens=False)]
    decoded = tok.decode_batch(ids + req["id_lists"], skip_special_tokens=False)
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"ids": ids, "decoded": decoded, "version": tokenizers.__version__}, f, ensure_ascii=False)


def chat(inp, out):
    import transformers
    from transformers import AutoTokenizer

    cases = json.load(open(inp, encoding="utf-8"))
    toks = {}
    res = []
    for c in cases:
        if c["dir"] not in toks:
            toks[c["dir"]] = AutoTokenizer.from_pretrained(c["dir"])
        tok = toks[c["dir"]]
        args = dict(tools=c["tools"], add_generation_prompt=c["add_generation_prompt"], **c["kwargs"])
        try:
            text = tok.apply_chat_template(c["messages"], tokenize=False, **args)
            ids = tok.apply_chat_template(c["messages"], tokenize=True, return_dict=True, **args)["input_ids"]
            res.append({"text": text, "ids": list(ids)})
        except Exception as e:  # the case says what transformers refused
            res.append({"error": f"{type(e).__name__}: {e}"})
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"cases": res, "version": transformers.__version__}, f, ensure_ascii=False)


if __name__ == "__main__":
    if sys.argv[1] == "tokenize":
        tokenize(*sys.argv[2:5])
    elif sys.argv[1] == "chat":
        chat(*sys.argv[2:4])
    else:
        sys.exit(f"unknown mode {sys.argv[1]!r}")
