"""Regenerates testdata/sample-trajectories.jsonl: 16 hand-shaped calculator-tool
trajectories (4 prompts x 4 samples) in the record schema of docs/DESIGN.md §3.
Token ids are character codes (as the character-level test tokenizer would
produce); tool turns have loss_mask 0. Run: python scripts/testdata/gen_sample.py"""
import json, random

random.seed(0)
out = []
for p in range(4):
    a, b = 100 + 37 * p, 20 + 11 * p
    prompt = f"What is {a}*{b}? Use the calculator."
    for s in range(4):
        good = (s + p) % 2 == 0
        call = f'<tool_call>\n{{"name": "calculator", "arguments": {{"expression": "{a}*{b}"}}}}\n</tool_call>'
        tool = f"<tool_response>\n{a*b}\n</tool_response>"
        answer = str(a * b if good else a * b + 10)
        parts = [(call, 1), (tool, 0), (f"The answer is {answer}.", 1)]
        ptoks = [ord(c) for c in prompt]
        rtoks, mask, lps = [], [], []
        for text, m in parts:
            for c in text:
                rtoks.append(ord(c)); mask.append(m)
                lps.append(round(-random.random() * 2, 4) if m else 0.0)
        out.append({
            "prompt_id": f"sample:{p}", "sample_index": s, "data_source": "arith",
            "prompt": prompt, "label": str(a * b), "tokens": ptoks + rtoks, "prompt_len": len(ptoks),
            "response": "".join(t for t, _ in parts), "loss_mask": mask, "rollout_log_probs": lps,
            "status": "completed", "finish_reason": "stop", "turns": 2, "tool_calls": 1,
            "weight_versions": ["0"], "reward": 1.0 if good else 0.0,
            "reward_detail": {"extracted": answer, "expected": str(a * b)},
            "metadata": {"difficulty": 2},
        })
with open("testdata/sample-trajectories.jsonl", "w") as f:
    for r in out:
        f.write(json.dumps(r) + "\n")
