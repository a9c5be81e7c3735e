#!/usr/bin/env bash
# What `arl-rollout --trace` costs the rollout's hot path: instructions per
# request (callgrind, so the count does not depend on the machine's load)
# without and with `--trace`, and of another build (BASE=path/to/arl-rollout,
# e.g. one built from the commit before), against `arl-serve --scripted` (a
# calculator episode: two `/generate` calls and a tool call per sample).
# Each count is the difference between runs over N2 and N1 prompts divided
# by the extra requests (start-up cancels out), the median of ROUNDS runs.
# Target (issue 27): without `--trace`, within 2% of the build before it.
#
#   N1=100 N2=300 ROUNDS=3 BASE=/tmp/base/arl-rollout scripts/bench/rollout-trace-cost.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
# The machine (CPU model, cores, memory, commit) beside every figure.
. scripts/bench/lib/cpu.sh; bench_machine
# The environment `make` sets (tch finds libtorch in the cached venv).
. scripts/env.sh
N1=${N1:-100}; N2=${N2:-300}; ROUNDS=${ROUNDS:-3}
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
cargo build --release --quiet -p arl-rollout -p arl-serve
W=$(mktemp -d "${TMPDIR:-/tmp}/arl-bench-trace.XXXXXX")
SERVER=
. scripts/lib/progress.sh
trap '[ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null; rm -rf "$W"; progress_exit' EXIT
python3 - "$W" "$N1" "$N2" <<'EOF'
import json, os, sys
w, n1, n2 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
d = os.path.join(w, "model"); os.makedirs(d)
# A byte-level tokenizer with Qwen's special tokens (as the tests' scripted model).
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256)); cs = bs[:]; k = 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + k); k += 1
chars = dict(zip(bs, cs))
added = [{"id": 256 + i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": sp}
         for i, (t, sp) in enumerate([("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True), ("<tool_call>", False), ("</tool_call>", False)])]
bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
json.dump({"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None, "pre_tokenizer": bl,
           "post_processor": None, "decoder": dict(bl, add_prefix_space=True),
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None, "end_of_word_suffix": None,
                     "fuse_unk": False, "byte_fallback": False, "vocab": {chr(chars[b]): b for b in range(256)}, "merges": []}},
          open(os.path.join(d, "tokenizer.json"), "w"))
tmpl = ("{%- if tools %}{{- '<|im_start|>system\\n# Tools\\n<tools>' }}{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
        "{{- '\\n</tools><|im_end|>\\n' }}{%- endif %}{%- for m in messages %}"
        "{%- if m.role == 'tool' %}{{- '<|im_start|>user\\n<tool_response>\\n' + m.content + '\\n</tool_response><|im_end|>\\n' }}"
        "{%- else %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif %}"
        "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
json.dump({"eos_token": "<|im_end|>", "chat_template": tmpl}, open(os.path.join(d, "tokenizer_config.json"), "w"))
json.dump({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 261, "eos_token_id": 258,
           "max_position_embeddings": 1000000}, open(os.path.join(d, "config.json"), "w"))
open(os.path.join(d, "model.safetensors"), "wb").close()
call = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "347*29"}}\n</tool_call>'
with open(os.path.join(w, "script.jsonl"), "w") as f:
    f.write(json.dumps({"when": "SCRIPT:calc", "completion": "I will compute.\n" + call}) + "\n")
    f.write(json.dumps({"when": "<tool_response>", "completion": "The answer is 10063."}) + "\n")
for n in (n1, n2):
    with open(os.path.join(w, "p%d.jsonl" % n), "w") as f:
        for i in range(n):
            f.write(json.dumps({"id": "p%d" % i, "prompt": "Task %d. SCRIPT:calc" % i}) + "\n")
EOF
target/release/arl-serve --model-path "$W/model" --scripted "$W/script.jsonl" --port 0 >"$W/serve.log" 2>&1 &
SERVER=$!
for _ in $(seq 100); do grep -q "listening on" "$W/serve.log" && break; sleep 0.2; done
URL=$(sed -n 's/.*listening on //p' "$W/serve.log")
[ -n "$URL" ] || { cat "$W/serve.log" >&2; exit 1; }

# Instructions of one run over N prompts: `count BIN N [ARGS…]`.
count() {
  local bin=$1 n=$2; shift 2
  valgrind --tool=callgrind --callgrind-out-file="$W/cg.out" "$bin" -q -i "$W/p$n.jsonl" --endpoint "$URL" \
    --tokenizer "$W/model" --tools calculator --concurrency 8 -o "$W/out.jsonl" "$@" 2>&1 |
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
# Median over ROUNDS of the instructions per extra request (2 per sample):
# `run BIN [ARGS…]`.
run() {
  local bin=$1; shift
  local v=() a b
  for _ in $(seq "$ROUNDS"); do
    a=$(count "$bin" "$N1" "$@"); b=$(count "$bin" "$N2" "$@")
    v+=("$(( (b - a) / (2 * (N2 - N1)) ))")
  done
  printf '%s\n' "${v[@]}" | sort -n | sed -n "$(( (ROUNDS + 1) / 2 ))p"
}
pct() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.2f%%", 100 * (a - b) / b }'; }
progress_phase "rollout-trace-cost: callgrind, $ROUNDS rounds of $N1 and $N2 prompts, without --trace"
off=$(run target/release/arl-rollout)
# The count per request assumes two turns per sample.
[ "$(grep -c '"turns":2,' "$W/out.jsonl")" = "$N2" ] || { echo "episodes are not two turns each" >&2; exit 1; }
progress_phase "rollout-trace-cost: the same with --trace"
on=$(run target/release/arl-rollout --trace "$W/trace.jsonl")
progress_stop
printf '%-28s %12s\n' "instructions per request" ""
printf '%-28s %12d\n' "without --trace" "$off"
printf '%-28s %12d  (%s)\n' "with --trace" "$on" "$(pct "$on" "$off")"
if [ -n "${BASE:-}" ]; then
  progress_phase "rollout-trace-cost: the same for BASE"
  base=$(run "$BASE")
  progress_stop
  printf '%-28s %12d\n' "BASE (${BASE})" "$base"
  printf '%-28s %12s\n' "without --trace vs BASE" "$(pct "$off" "$base")"
fi
