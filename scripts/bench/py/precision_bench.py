"""What bf16 buys on this CPU: float32 and bf16 side by side, measured in one
run (scripts/bench/precision.sh says how to call it).

usage: precision_bench.py BIN_DIR MODEL_DIR THREADS "CONCS" NEW PROMPT DP

1. libtorch's matrix multiply at serve and train shapes, float32 vs bf16
   (TFLOP/s, best of a few rounds, THREADS threads);
2. the memory bandwidth THREADS threads stream (GB/s, summing a 1 GiB
   tensor), and from it each precision's floor for one decode step: the
   weights' bytes ÷ bandwidth (a step reads every weight once);
3. greedy decoding at each CONC concurrent requests × NEW new tokens, in
   tokens/s and ms per decode step (the round's wall time ÷ NEW): arl-serve
   (DP replicas) four ways — `--dtype float32 --decode-matmul blas` (libtorch's
   products, arl before issue 44), `--dtype float32` (arl's float32 decode
   kernel where it measures faster), `--dtype auto` (what arl-serve picks
   by itself, bf16 decode weights included) and `--dtype bfloat16` (a whole
   bf16 model) — and transformers' `generate` in float32 and bf16 (one batch);
   With LLAMA_SERVER and LLAMA_GGUF in the environment (precision.sh sets
   them when it could build llama.cpp), llama.cpp's server on that GGUF too,
   `-t THREADS -np` the most requests, the same prompt ids; its
   system_info line is printed. `--dtype auto` also runs once more with
   ARL_NATIVE_DECODE=0 (its decode step through libtorch's operators) to
   show what the native step buys.
4. the log-prob gap of `--dtype auto`: the log-probs it returns for its own
   greedy tokens against the float32 ones of the same tokens, scored in one
   prefill (libtorch's products, as `arl-train` scores them).
"""
import itertools
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


SERVERS = itertools.count(1)  # one log file per server: two run at once for the gap


def start_serve(args, env=None):
    log = f"/tmp/precision-bench-serve-{os.getpid()}-{next(SERVERS)}.log"
    p = subprocess.Popen([os.path.join(bindir, "arl-serve"), "--model-path", model_dir, *args, "--port", "0",
                          "--dp-size", str(dp), "--max-running-requests", str(max(concs))],
                         stdout=subprocess.DEVNULL, stderr=open(log, "w"), env={**os.environ, **(env or {})})
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


def arl_rates(args, gap_against=None, keep=False, env=None):
    """Rates at each concurrency, the start-up lines that say what was
    chosen, (gap_against: a float32 server's URL) the log-prob gap, and
    (keep) the server, left running: (process, URL, log)."""
    p, url, log = start_serve(args, env)
    sp = {"temperature": 0, "max_new_tokens": new, "min_new_tokens": new, "ignore_eos": True}
    out, gap = {}, None
    try:
        first = post(url, {"input_ids": prompts_for(1)[0], "sampling_params": sp, "return_logprob": True})
        if gap_against:
            gap = logprob_gap(first, gap_against)
        for conc in concs:
            prompts = prompts_for(conc)
            with ThreadPoolExecutor(conc) as ex:
                def round_():
                    return sum(o["meta_info"]["completion_tokens"] for o in ex.map(
                        lambda q: post(url, {"input_ids": q, "sampling_params": sp}), prompts))
                dt = best_of(round_, 3)
            out[conc] = (conc * new / dt, dt / new * 1e3)
    finally:
        chosen = [l.strip() for l in open(log) if "matmul" in l]
        if not keep:
            p.terminate()
            p.wait()
            os.unlink(log)
    return out, chosen, gap, ((p, url, log) if keep else None)


def logprob_gap(item, ref_url):
    """|Δ log-prob| (mean, max) of `item`'s greedy tokens against the
    float32 server at `ref_url` scoring the same tokens in one prefill."""
    prompt = prompts_for(1)[0]
    got = [t[0] for t in item["meta_info"]["output_token_logprobs"]]
    ids = [t[1] for t in item["meta_info"]["output_token_logprobs"]]
    ref = post(ref_url, {"input_ids": prompt + ids, "return_logprob": True, "logprob_start_len": len(prompt) - 1,
                         "sampling_params": {"temperature": 0, "max_new_tokens": 1}})
    want = [t[0] for t in ref["meta_info"]["input_token_logprobs"]][-len(ids):]
    d = [abs(a - b) for a, b in zip(got, want) if a is not None and b is not None]
    return sum(d) / len(d), max(d)


def llama_rates():
    """llama.cpp's server on LLAMA_GGUF: rates at each concurrency and its
    system_info line; None without LLAMA_SERVER."""
    server, gguf = os.environ.get("LLAMA_SERVER"), os.environ.get("LLAMA_GGUF")
    if not server or not gguf:
        return None, "llama.cpp: not run (LLAMA_SERVER / LLAMA_GGUF unset)"
    import socket
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        port = so.getsockname()[1]
    log = f"/tmp/precision-bench-llama-{os.getpid()}.log"
    slots = max(concs)
    p = subprocess.Popen([server, "-m", gguf, "-t", str(threads), "-tb", str(threads), "-np", str(slots),
                          "-c", str(slots * (plen + new + 16)), "--host", "127.0.0.1", "--port", str(port)],
                         stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                with urllib.request.urlopen(url + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if p.poll() is not None:
                sys.exit("llama-server did not start:\n" + open(log).read()[-2000:])
            time.sleep(0.2)

        def one(q):
            req = urllib.request.Request(url + "/completion", data=json.dumps({
                "prompt": q, "n_predict": new, "temperature": 0, "ignore_eos": True, "cache_prompt": False,
            }).encode(), headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=3600) as r:
                return json.loads(r.read())["tokens_predicted"]

        out = {}
        for conc in concs:
            prompts = prompts_for(conc)
            with ThreadPoolExecutor(conc) as ex:
                dt = best_of(lambda: sum(ex.map(one, prompts)), 3)
            out[conc] = (conc * new / dt, dt / new * 1e3)
    finally:
        p.terminate()
        p.wait()
    info = next((l.strip() for l in open(log) if "system_info" in l), "llama.cpp: no system_info line")
    os.unlink(log)
    return out, info


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

# The float32 reference stays up for the log-prob gap of `--dtype auto`.
blas, _, _, (ref, ref_url, ref_log) = arl_rates(["--dtype", "float32", "--decode-matmul", "blas"], keep=True)
try:
    auto, pick_auto, gap, _ = arl_rates(["--dtype", "auto"], gap_against=ref_url)
finally:
    ref.terminate()
    ref.wait()
    os.unlink(ref_log)
arl32, pick32, _, _ = arl_rates(["--dtype", "float32"])
arl16, _, _, _ = arl_rates(["--dtype", "bfloat16"])
ops, _, _, _ = arl_rates(["--dtype", "auto"], env={"ARL_NATIVE_DECODE": "0"})
hf32, hf16 = hf_rates(torch.float32), hf_rates(torch.bfloat16)
llama, llama_info = llama_rates()
l3 = next((l.split(":", 1)[1].strip() for l in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
           if l.startswith("L3 cache")), "unknown")
print(f"\ngreedy decoding, prompt {plen}, {new} new tokens each, best of 3 rounds; arl-serve --dp-size {dp}")
for line in pick32 + pick_auto:
    print("  " + line)
print(f"floors: the weights' bytes ÷ the bandwidth above; this CPU's L3 cache is {l3}: weights that fit in it "
      "stream faster than the floor says")
print(llama_info)
print("columns: arl blas = --dtype float32 --decode-matmul blas (arl before issue 44); arl fp32 = --dtype float32; "
      "arl auto = --dtype auto; auto ops = --dtype auto with ARL_NATIVE_DECODE=0; arl bf16 = --dtype bfloat16; "
      "llama.cpp = its server on the package's Q4_1 GGUF")
print(f"{'requests':>8} | {'floor fp32':>10} {'arl blas':>16} {'arl fp32':>16} {'HF fp32':>16} "
      f"| {'floor bf16':>10} {'arl auto':>16} {'auto ops':>16} {'arl bf16':>16} {'HF bf16':>16} {'llama.cpp':>16}"
      "   (tokens/s, ms per step)")
cell = lambda r: f"{r[0]:8.0f} {r[1]:6.1f}ms"  # noqa: E731
for c in concs:
    lc = cell(llama[c]) if llama else "-"
    print(f"{c:>8} | {floor['fp32']:8.2f}ms {cell(blas[c]):>16} {cell(arl32[c]):>16} {cell(hf32[c]):>16} "
          f"| {floor['bf16']:8.2f}ms {cell(auto[c]):>16} {cell(ops[c]):>16} {cell(arl16[c]):>16} {cell(hf16[c]):>16} "
          f"{lc:>16}")
print("\nratios: " + "; ".join(
    f"{c}: arl fp32/blas {arl32[c][0] / blas[c][0]:.2f}x, arl auto/blas {auto[c][0] / blas[c][0]:.2f}x, "
    f"native/ops {auto[c][0] / ops[c][0]:.2f}x, "
    f"arl auto/HF fp32 {auto[c][0] / hf32[c][0]:.2f}x, auto/HF bf16 {auto[c][0] / hf16[c][0]:.2f}x, "
    + (f"auto/llama.cpp {auto[c][0] / llama[c][0]:.2f}x, " if llama else "")
    + f"arl fp32 step/fp32 floor {arl32[c][1] / floor['fp32']:.2f}x, "
    f"auto step/bf16 floor {auto[c][1] / floor['bf16']:.2f}x"
    for c in concs))
print(f"\nlog-prob gap of --dtype auto against float32 ({new} greedy tokens of one request, scored by a float32 "
      f"prefill): mean |Δ| {gap[0]:.2e}, max {gap[1]:.2e}")
