"""What bf16 buys on this CPU: float32 and bf16 side by side, measured in one
run (scripts/bench/precision.sh says how to call it).

usage: precision_bench.py BIN_DIR MODEL_DIR THREADS "CONCS" NEW PROMPT DP

1. libtorch's matrix multiply at serve and train shapes, float32 vs bf16
   (TFLOP/s, best of a few rounds, THREADS threads);
2. the memory bandwidth THREADS threads stream (GB/s, summing a 1 GiB
   tensor), and from it each precision's floor for one decode step: the
   weights' bytes ÷ bandwidth (a step reads every weight once);
3. greedy decoding at each CONC concurrent requests × NEW new tokens:
   arl-serve `--dtype float32` and `--dtype bfloat16` (DP replicas), and
   transformers' `generate` in float32 and bf16 (one batch), in tokens/s and
   ms per decode step (the round's wall time ÷ NEW).
"""
import json
import os
import random
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
import torch  # noqa: E402

bindir, model_dir, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
concs = [int(c) for c in sys.argv[4].split()]
new, plen, dp = int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
torch.set_num_threads(threads)
cfg = json.load(open(os.path.join(model_dir, "config.json")))


def best_of(f, rounds=5):
    f()
    best = None
    for _ in range(rounds):
        t0 = time.perf_counter()
        f()
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    return best


def matmul_rates():
    h, i = cfg["hidden_size"], cfg["intermediate_size"]
    shapes = [(1, h, 2 * i), (8, h, 2 * i), (64, h, 2 * i), (512, h, 2 * i), (2048, h, i), (64, h, cfg["vocab_size"])]
    rows = []
    for m, k, n in shapes:
        r = {}
        for name, kind in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            x, w = torch.randn(m, k, dtype=kind), torch.randn(n, k, dtype=kind)
            rounds = 20 if m * k * n < 1e8 else 5
            dt = best_of(lambda: torch.nn.functional.linear(x, w), rounds)
            r[name] = 2 * m * k * n / dt / 1e12
        rows.append(((m, k, n), r))
    return rows


def bandwidth():
    a = torch.ones(256 * 1024 * 1024, dtype=torch.float32)  # 1 GiB
    dt = best_of(lambda: a.sum(), 5)
    return a.numel() * 4 / dt


def start_serve(dtype):
    log = f"/tmp/precision-bench-serve-{os.getpid()}.log"
    p = subprocess.Popen([os.path.join(bindir, "arl-serve"), "--model-path", model_dir, "--dtype", dtype, "--port", "0",
                          "--dp-size", str(dp), "--max-running-requests", str(max(concs))],
                         stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    for _ in range(1200):
        for line in open(log):
            if line.startswith("arl-serve: listening on "):
                return p, line.split("listening on ", 1)[1].strip(), log
        if p.poll() is not None:
            break
        time.sleep(0.1)
    p.kill()
    sys.exit("arl-serve did not start:\n" + open(log).read()[-2000:])


def post(url, body):
    req = urllib.request.Request(url + "/generate", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        return json.loads(r.read())


def prompts_for(conc):
    rng = random.Random(conc)
    return [[rng.randrange(10, cfg["vocab_size"]) for _ in range(plen)] for _ in range(conc)]


def arl_rates(dtype):
    p, url, log = start_serve(dtype)
    sp = {"temperature": 0, "max_new_tokens": new, "min_new_tokens": new, "ignore_eos": True}
    out = {}
    try:
        post(url, {"input_ids": prompts_for(1)[0], "sampling_params": sp})
        for conc in concs:
            prompts = prompts_for(conc)
            with ThreadPoolExecutor(conc) as ex:
                def round_():
                    return sum(o["meta_info"]["completion_tokens"] for o in ex.map(
                        lambda q: post(url, {"input_ids": q, "sampling_params": sp}), prompts))
                dt = best_of(round_, 3)
            out[conc] = (conc * new / dt, dt / new * 1e3)
    finally:
        chosen = [l.strip() for l in open(log) if "CPU matmul" in l]
        p.terminate()
        p.wait()
        os.unlink(log)
    return out, chosen


def hf_rates(kind):
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=kind).eval()
    kw = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)
    out = {}
    with torch.no_grad():
        for conc in concs:
            ids = torch.tensor(prompts_for(conc))
            dt = best_of(lambda: model.generate(ids, attention_mask=torch.ones_like(ids), **kw), 3)
            out[conc] = (conc * new / dt, dt / new * 1e3)
    return out


print(f"model {model_dir}: {cfg.get('model_type')} hidden {cfg['hidden_size']}, "
      f"{cfg['num_hidden_layers']} layers, vocabulary {cfg['vocab_size']}; {threads} threads; torch {torch.__version__}")
print("\nmatrix multiply [m×k]·[k×n], TFLOP/s (libtorch `linear`, best of rounds)")
print(f"{'m × k × n':>22} {'fp32':>8} {'bf16':>8} {'bf16/fp32':>10}")
for (m, k, n), r in matmul_rates():
    print(f"{f'{m} × {k} × {n}':>22} {r['fp32']:8.3f} {r['bf16']:8.3f} {r['bf16'] / r['fp32']:9.2f}x")

bw = bandwidth()
from transformers import AutoModelForCausalLM  # noqa: E402
n_params = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).parameters())
floor = {"fp32": n_params * 4 / bw * 1e3, "bf16": n_params * 2 / bw * 1e3}
print(f"\nmemory bandwidth ({threads} threads, summing 1 GiB): {bw / 1e9:.1f} GB/s; {n_params / 1e6:.1f} M parameters: "
      f"a decode step's floor is {floor['fp32']:.2f} ms in float32, {floor['bf16']:.2f} ms in bf16")

arl32, pick32 = arl_rates("float32")
arl16, _ = arl_rates("bfloat16")
hf32, hf16 = hf_rates(torch.float32), hf_rates(torch.bfloat16)
print(f"\ngreedy decoding, prompt {plen}, {new} new tokens each, best of 3 rounds; arl-serve --dp-size {dp}"
      + (f"; float32: {pick32[0]}" if pick32 else ""))
print(f"{'requests':>8} | {'floor fp32':>10} {'arl fp32':>16} {'HF fp32':>16} | {'floor bf16':>10} {'arl bf16':>16} {'HF bf16':>16}"
      "   (tokens/s, ms per step)")
for c in concs:
    cell = lambda r: f"{r[0]:8.0f} {r[1]:6.1f}ms"  # noqa: E731
    print(f"{c:>8} | {floor['fp32']:8.2f}ms {cell(arl32[c]):>16} {cell(hf32[c]):>16} | {floor['bf16']:8.2f}ms "
          f"{cell(arl16[c]):>16} {cell(hf16[c]):>16}")
print("\nratios: " + "; ".join(
    f"{c}: arl bf16/fp32 {arl16[c][0] / arl32[c][0]:.2f}x, arl fp32/HF fp32 {arl32[c][0] / hf32[c][0]:.2f}x, "
    f"arl fp32 step/floor {arl32[c][1] / floor['fp32']:.1f}x" for c in concs))
