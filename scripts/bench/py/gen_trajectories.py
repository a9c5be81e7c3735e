"""Writes N synthetic trajectory records (JSONL) shaped like real rollouts:
a prompt of ~128 tokens, a response of RESP tokens, per-token loss mask,
rollout/ref log-probs and advantages, and the scalar fields. Deterministic."""
import json, sys
import numpy as np

n = int(sys.argv[1]); resp = int(sys.argv[2]); out = sys.argv[3]
rng = np.random.default_rng(0)
with open(out, "w") as f:
    for i in range(n):
        plen = 96 + int(rng.integers(0, 64))
        toks = rng.integers(0, 151_000, plen + resp).tolist()
        mask = (rng.random(resp) < 0.85).astype(int).tolist()
        lp = np.round(-rng.random(resp) * 4, 6).astype(np.float32)
        lp[np.array(mask) == 0] = 0.0
        rec = {
            "prompt_id": f"bench:{i // 8}", "sample_index": i % 8, "data_source": "gsm8k",
            "prompt": f"Question {i}: Natalia sold clips to 48 of her friends in April ...",
            "label": str(i % 97), "tokens": toks, "prompt_len": plen,
            "response": "Let me compute. <tool_call>...</tool_call> The answer is \\boxed{42}.",
            "loss_mask": mask, "rollout_log_probs": [float(x) for x in lp],
            "status": "completed", "finish_reason": "stop", "turns": 2, "tool_calls": 1,
            "weight_versions": ["41"], "reward": float(i % 2),
            "reward_detail": {"extracted": "42", "correct": bool(i % 2)},
            "advantages": [float(x) for x in np.round(lp * 0.5, 6).astype(np.float32)],
            "metadata": {"difficulty": i % 5},
        }
        f.write(json.dumps(rec) + "\n")
