#!/usr/bin/env python3
"""arl's CUDA path against PyTorch on one GPU, in one call: the driver that
scripts/device-check.sh runs after its probe (see docs/device.md).

    check.py --root DIR --bin DIR --work DIR --json FILE [--dry-run]

Five checks, each with an arl half (the bundle's `arl-train` / `arl-serve`)
and a PyTorch half (transformers on the same weights, the same inputs):

  load      the binaries start against this machine's libtorch and see the GPU
  logits    next-token log-probs of every position (log-softmax of the logits),
            float32, for the tiny Qwen2 / Qwen3 / Llama / tiny-model checkpoints
  greedy    arl-serve's greedy tokens against `generate`'s, float32, tiny-model
  rl step   GRPO/PPO-clip steps in bf16 (float32 master weights and AdamW state)
            at the Qwen2.5-0.5B shape with random weights: step time, tokens/s,
            peak GPU memory, MFU
  generate  greedy decoding of CONC requests × NEW tokens: arl-serve (HTTP,
            continuous batching) against transformers' `generate` (one batch)

The PyTorch half of every check runs whatever happens to the arl half, so a
bundle whose binaries fail to load still reports the GPU and the baselines.
`--dry-run` runs the same code on the CPU, float32, at tiny shapes (`make test`).

Writes FILE (JSON: machine, every row, verdict) and prints one Markdown table.
Exit status: 0 every check passed, 1 some check failed.
"""
import argparse
import json
import math
import os
import platform
import random
import shutil
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

# transformers' progress bars and advice would drown the table's log.
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch  # noqa: E402

# Peak dense bf16 matrix throughput (FLOP/s) by GPU name, from the vendors'
# data sheets (the figure without sparsity): the denominator of MFU.
PEAK_BF16 = [
    ("H200", 989.4e12),
    ("H100 PCIe", 756.0e12),
    ("H100 NVL", 835.0e12),
    ("H100", 989.4e12),  # SXM (HBM3)
    ("A100", 312.0e12),
    ("L40S", 362.1e12),
]

# Qwen2.5-0.5B's shape (reference/real-models.md), random weights.
QWEN25_05B = dict(model_type="qwen2", architectures=["Qwen2ForCausalLM"], vocab_size=151936, hidden_size=896,
                  intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                  max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True,
                  hidden_act="silu", initializer_range=0.02, bos_token_id=151643, eos_token_id=151645)
# The dry run's stand-in: the same family and code paths, CPU-sized.
DRY_SHAPE = dict(QWEN25_05B, vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                 bos_token_id=0, eos_token_id=1)

LOGIT_MODELS = ["testdata/golden/qwen2", "testdata/golden/qwen3", "testdata/golden/llama", "testdata/tiny-model"]
LOGIT_TOL = 1e-4


class Checks:
    """The rows of the table, in order, and the verdict."""

    def __init__(self, path, head):
        self.rows = []
        self.failed = []
        self.path = path
        self.head = head

    def save(self, **more):
        """The JSON file, rewritten (atomically) after every row: a run cut
        short by its time limit still leaves what it measured."""
        result = dict(self.head, rows=self.rows, failed=self.failed, passed=not self.failed, **more)
        with open(self.path + ".tmp", "w") as f:
            json.dump(result, f, indent=1)
        os.replace(self.path + ".tmp", self.path)
        return result

    def row(self, check, what, arl=None, torch_=None, note="", ok=True):
        self.rows.append(dict(check=check, what=what, arl=arl, pytorch=torch_, note=note, ok=ok))
        if not ok:
            self.failed.append(f"{check}: {what}")
        self.save(complete=False)
        print(f"device-check: {check}: {what}: arl={arl} pytorch={torch_} {note}", file=sys.stderr, flush=True)


def log(msg):
    print(f"device-check: {msg}", file=sys.stderr, flush=True)


def run(cmd, timeout, **kw):
    """A binary's run: (ok, stdout, the tail of stderr)."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    except subprocess.TimeoutExpired:
        return False, "", f"timed out after {timeout} s"
    except OSError as e:
        return False, "", str(e)
    return p.returncode == 0, p.stdout, p.stderr[-2000:]


def fmt(x, unit=""):
    if x is None:
        return None
    if abs(x) >= 100:
        return f"{x:,.0f}{unit}"
    return f"{x:.3g}{unit}"


def gib(b):
    return None if b is None else f"{b / 2**30:.2f} GiB"


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


# --- machine -----------------------------------------------------------------

def machine(dev):
    m = dict(python=platform.python_version(), torch=torch.__version__, cuda=torch.version.cuda,
             cpu=cpu_model(), device=str(dev))
    try:
        import transformers
        m["transformers"] = transformers.__version__
    except ImportError:
        m["transformers"] = None
    if dev.type == "cuda":
        ok, out, _ = run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], 30)
        m["driver"] = out.strip().splitlines()[0] if ok and out.strip() else None
        p = torch.cuda.get_device_properties(dev)
        m.update(gpu=p.name, gpu_memory_bytes=p.total_memory, multiprocessors=p.multi_processor_count,
                 capability=f"{p.major}.{p.minor}")
        m["peak_bf16_flops"] = next((f for k, f in PEAK_BF16 if k in p.name), None)
    return m


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


# --- load ----------------------------------------------------------------------

def check_load(c, bindir, dev, env, tiny):
    """Each binary starts (its shared libraries resolve) and, on a GPU, sees it."""
    ok_all = True
    for b in ("arl-train", "arl-serve"):
        path = os.path.join(bindir, b)
        ok, out, err = run([path, "--version"], 60, env=env)
        missing = ldd_missing(path, env)
        note = f"missing: {', '.join(missing)}" if missing else ("" if ok else last_line(err))
        c.row("load", b, arl=(out.strip() if ok else "failed"), note=note, ok=ok)
        ok_all &= ok
    if ok_all and dev.type == "cuda":
        # libtorch_cuda linked and the driver found: arl-train resolves the
        # device before it reads any input.
        ok, _, err = run([os.path.join(bindir, "arl-train"), "logprobs", "--model", tiny, "--device", str(dev)], 120,
                         input="", env=env)
        c.row("load", f"arl-train sees {dev}", arl="yes" if ok else "no", note="" if ok else last_line(err), ok=ok)
        ok_all &= ok
    return ok_all


def ldd_missing(path, env):
    if not shutil.which("ldd") or not os.path.exists(path):
        return []
    ok, out, _ = run(["ldd", path], 30, env=env)
    return [l.split()[0] for l in out.splitlines() if "not found" in l]


# --- logits --------------------------------------------------------------------

def seqs_for(vocab, n=3, length=12, seed=1):
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(length - 2 * i)] for i in range(n)]


def torch_logprobs(model_dir, seqs, dev):
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(dev).eval()
    out = []
    with torch.no_grad():
        for s in seqs:
            ids = torch.tensor([s], device=dev)
            lp = torch.log_softmax(model(input_ids=ids).logits.float()[0], -1)
            out.append(lp[:-1].gather(-1, ids[0, 1:, None])[:, 0].cpu())
    return out


def arl_logprobs(bindir, model_dir, seqs, dev, work, env):
    records = "".join(json.dumps({"prompt_id": f"s{i}", "tokens": s, "prompt_len": 1, "loss_mask": [1] * (len(s) - 1)}) + "\n"
                      for i, s in enumerate(seqs))
    out = os.path.join(work, "logprobs.jsonl")
    ok, _, err = run([os.path.join(bindir, "arl-train"), "logprobs", "--model", model_dir, "--device", str(dev),
                      "-o", out], 300, input=records, env=env)
    if not ok:
        return None, err
    return [torch.tensor(json.loads(l)["ref_log_probs"]) for l in open(out)], ""


def check_logits(c, root, bindir, dev, work, arl_ok, env):
    for rel in LOGIT_MODELS:
        d = os.path.join(root, rel)
        name = os.path.basename(rel)
        vocab = json.load(open(os.path.join(d, "config.json")))["vocab_size"]
        seqs = seqs_for(vocab)
        ref = torch_logprobs(d, seqs, dev)
        if not arl_ok:
            c.row("logits", f"{name} fp32", torch_=f"{sum(len(r) for r in ref)} log-probs", note="arl not run", ok=False)
            continue
        got, err = arl_logprobs(bindir, d, seqs, dev, work, env)
        if got is None:
            c.row("logits", f"{name} fp32", arl="failed", torch_="ok", note=last_line(err), ok=False)
            continue
        diff = max((a.double() - b.double()).abs().max().item() for a, b in zip(got, ref))
        c.row("logits", f"{name} fp32", arl=f"max abs Δ {diff:.1e}", torch_=f"{sum(len(r) for r in ref)} log-probs",
              note=f"tolerance {LOGIT_TOL:.0e}", ok=diff < LOGIT_TOL)


def last_line(err):
    lines = [l for l in err.strip().splitlines() if l.strip()]
    return lines[-1][:300] if lines else ""


# --- greedy decoding ------------------------------------------------------------

def check_greedy(c, root, bindir, dev, work, arl_ok, env):
    """arl-serve's decoding path (KV cache, decode attention, sampling at
    temperature 0) against transformers' `generate`, float32, on the tiny
    model: the same tokens."""
    from transformers import AutoModelForCausalLM
    d = os.path.join(root, "testdata/tiny-model")
    vocab = json.load(open(os.path.join(d, "config.json")))["vocab_size"]
    rng = random.Random(5)
    n, plen, new = 4, 12, 16
    prompts = [[rng.randrange(2, vocab) for _ in range(plen)] for _ in range(n)]
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).to(dev).eval()
    ids = torch.tensor(prompts, device=dev)
    with torch.no_grad():
        ref = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new,
                             do_sample=False, pad_token_id=0)[:, plen:].tolist()
    label = f"tiny-model fp32, {n} × {new} tokens"
    if not arl_ok:
        c.row("greedy", label, torch_="reference", note="arl not run", ok=False)
        return
    sp = {"temperature": 0, "max_new_tokens": new, "min_new_tokens": new, "ignore_eos": True}
    try:
        with Served(bindir, d, dev, "float32", n, env, os.path.join(work, "serve-greedy.log")) as url:
            got = [post(url, {"input_ids": p, "sampling_params": sp}, 120)["output_ids"] for p in prompts]
    except Exception as e:  # noqa: BLE001 — any failure of the arl half is a row, not a crash
        c.row("greedy", label, arl="failed", torch_="reference", note=str(e)[:300], ok=False)
        return
    same = sum(a == b for a, b in zip(got, ref))
    c.row("greedy", label, arl=f"{same}/{n} identical", torch_="reference", note="arl-serve vs generate",
          ok=same == n)


# --- the random model ------------------------------------------------------------

def make_model(root, shape, dtype, out):
    """A random checkpoint of `shape`, written by transformers (so the PyTorch
    half needs nothing of arl), with the tiny model's tokenizer files."""
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg = AutoConfig.for_model(**{k: v for k, v in shape.items() if k != "architectures"})
    torch.manual_seed(0)
    with torch.device("cpu"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    model.save_pretrained(out, safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(root, "testdata/tiny-model", f), out)
    n_params = sum(p.numel() for p in model.parameters())
    del model
    return n_params


def matmul_params(shape):
    """Parameters that take part in a matrix multiply per token: the
    decoder's projections and the LM head (the embedding lookup is none)."""
    h, i, L = shape["hidden_size"], shape["intermediate_size"], shape["num_hidden_layers"]
    hd = shape.get("head_dim") or h // shape["num_attention_heads"]
    q, kv = shape["num_attention_heads"] * hd, shape["num_key_value_heads"] * hd
    per_layer = h * q + 2 * h * kv + q * h + 3 * h * i
    return L * per_layer + h * shape["vocab_size"]


def train_flops(shape, lens):
    """PaLM's count (appendix B): 6·N per token for the matrix multiplies,
    forward and backward, plus 12·L·(heads·head_dim)·T per token of a
    sequence of T tokens for attention's scores and weighted sum."""
    hd = shape.get("head_dim") or shape["hidden_size"] // shape["num_attention_heads"]
    attn = 12 * shape["num_hidden_layers"] * shape["num_attention_heads"] * hd
    return sum(6 * matmul_params(shape) * t + attn * t * t for t in lens)


# --- rl step -----------------------------------------------------------------------

def rl_batch(shape, n, prompt, response, seed=2):
    """Records of random tokens, advantages ±1, and rollout log-probs of a
    uniform policy (what a random model's are, near enough): ratios near 1."""
    rng = random.Random(seed)
    v = shape["vocab_size"]
    old = -math.log(v)
    recs = []
    for i in range(n):
        toks = [rng.randrange(2, v) for _ in range(prompt + response)]
        recs.append(dict(prompt_id=f"p{i // 4}", tokens=toks, prompt_len=prompt, loss_mask=[1] * response,
                         advantages=[1.0 if i % 2 == 0 else -1.0] * response, rollout_log_probs=[old] * response))
    return recs


def arl_rl(bindir, model_dir, recs, steps, batch, mb_tokens, dev, precision, work, env, timeout):
    data = "".join(json.dumps(r) + "\n" for r in recs * steps)
    metrics = os.path.join(work, "train-metrics.jsonl")
    cmd = [os.path.join(bindir, "arl-train"), "--model", model_dir, "--device", str(dev), "--precision", precision,
           "--lr", "1e-6", "--global-batch-size", str(batch), "--max-tokens-per-micro-batch", str(mb_tokens),
           "--metrics", metrics]
    ok, _, err = run(cmd, timeout, input=data, env=env)
    if not ok:
        return None, err
    return [json.loads(l) for l in open(metrics)], ""


def torch_rl(model_dir, recs, steps, mb_tokens, dev, bf16):
    """The same steps in PyTorch: bf16 weights and activations, float32
    master weights and AdamW moments (arl's `--precision bf16`), PPO's
    clipped loss averaged over response tokens, micro-batches of at most
    `mb_tokens` tokens, padded."""
    from transformers import AutoModelForCausalLM
    dtype = torch.bfloat16 if bf16 else torch.float32
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(dev).train()
    params = [p for p in model.parameters()]
    master = [p.detach().float().clone().requires_grad_(True) for p in params] if bf16 else params
    opt = torch.optim.AdamW(master, lr=1e-6, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    L = len(recs[0]["tokens"])
    per_mb = max(1, mb_tokens // L)
    n_tok = sum(len(r["loss_mask"]) for r in recs)
    times = []
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    for _ in range(steps):
        sync(dev)
        t0 = time.perf_counter()
        for i in range(0, len(recs), per_mb):
            mb = recs[i:i + per_mb]
            ids = torch.tensor([r["tokens"] for r in mb], device=dev)
            p = mb[0]["prompt_len"]
            adv = torch.tensor([r["advantages"] for r in mb], device=dev)
            old = torch.tensor([r["rollout_log_probs"] for r in mb], device=dev)
            logits = model(input_ids=ids).logits[:, p - 1:-1].float()
            lp = torch.log_softmax(logits, -1).gather(-1, ids[:, p:, None])[..., 0]
            ratio = torch.exp(lp - old)
            loss = -torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv).sum() / n_tok
            loss.backward()
            del logits, lp, ratio, loss
        if bf16:
            for p, m in zip(params, master):
                m.grad = p.grad.float()
                p.grad = None
        torch.nn.utils.clip_grad_norm_(master, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if bf16:
            with torch.no_grad():
                for p, m in zip(params, master):
                    p.copy_(m)
        sync(dev)
        times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated(dev) if dev.type == "cuda" else None
    del model, opt, master, params
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return times, peak


def check_rl(c, bindir, model_dir, shape, dev, work, arl_ok, env, m, dry):
    if dry:
        n, prompt, response, steps, mb_tokens = 4, 16, 48, 2, 128
    else:
        n, prompt, response, steps, mb_tokens = 16, 256, 768, 3, 8192
    recs = rl_batch(shape, n, prompt, response)
    tokens = n * (prompt + response)
    flops = train_flops(shape, [prompt + response] * n)
    peak = m.get("peak_bf16_flops")
    label = f"{n} × {prompt}+{response} tokens, {'fp32' if dry else 'bf16'}"
    times, tpeak = torch_rl(model_dir, recs, steps, mb_tokens, dev, bf16=not dry)
    t_torch = times[-1]
    arl = None
    if arl_ok:
        lines, err = arl_rl(bindir, model_dir, recs, steps, n, mb_tokens, dev, "fp32" if dry else "bf16", work, env,
                            timeout=120 if dry else 300)
        if lines is None:
            c.row("rl step", label, arl="failed", torch_=f"{t_torch:.3f} s", note=last_line(err), ok=False)
        elif len(lines) != steps:
            c.row("rl step", label, arl=f"{len(lines)} steps", note=f"expected {steps} metrics lines", ok=False)
        else:
            arl, arl_first = lines[-1], lines[0]
    else:
        c.row("rl step", label, torch_=f"{t_torch:.3f} s", note="arl not run", ok=False)
    t_arl = arl["step_time_s"] if arl else None
    if arl is not None:
        c.row("rl step", "step time (last of %d)" % steps, arl=f"{t_arl:.3f} s", torch_=f"{t_torch:.3f} s",
              note=f"{label}; PyTorch time / arl time {t_torch / t_arl:.2f}×", ok=math.isfinite(arl["loss"]))
        c.row("rl step", "first step (warm-up)", arl=f"{arl_first['step_time_s']:.3f} s", torch_=f"{times[0]:.3f} s")
    c.row("rl step", "tokens/s", arl=fmt(tokens / t_arl) if t_arl else None, torch_=fmt(tokens / t_torch))
    c.row("rl step", "peak GPU memory (allocated)", arl=gib(arl.get("peak_gpu_allocated_bytes")) if arl else None,
          torch_=gib(tpeak), note="CPU: not measured" if dev.type != "cuda" else "")
    if peak:
        c.row("rl step", "MFU", arl=f"{flops / t_arl / peak:.1%}" if t_arl else None,
              torch_=f"{flops / t_torch / peak:.1%}", note=f"{flops / 1e12:.1f} TFLOP per step, peak {peak / 1e12:.0f} TFLOP/s")
    else:
        c.row("rl step", "MFU", note="no peak figure for this device")
    return dict(tokens=tokens, flops=flops, arl=arl, torch_times=times, torch_peak=tpeak)


# --- generate ----------------------------------------------------------------------

def start_serve(bindir, model_dir, dev, dtype, conc, env, log_path):
    log = open(log_path, "w")
    p = subprocess.Popen([os.path.join(bindir, "arl-serve"), "--model-path", model_dir, "--device", str(dev),
                          "--dtype", dtype, "--port", "0", "--max-running-requests", str(conc)],
                         stdout=subprocess.DEVNULL, stderr=log, env=env)
    deadline = time.time() + 180
    while time.time() < deadline:
        if p.poll() is not None:
            break
        for line in open(log_path):
            if line.startswith("arl-serve: listening on "):
                return p, line.split("listening on ", 1)[1].strip()
        time.sleep(0.2)
    p.kill()
    p.wait()
    raise RuntimeError(last_line(open(log_path).read()) or "arl-serve did not start")


class Served:
    """arl-serve on `model_dir` for the length of a `with` block."""

    def __init__(self, bindir, model_dir, dev, dtype, conc, env, log_path):
        self.args = (bindir, model_dir, dev, dtype, conc, env, log_path)

    def __enter__(self):
        self.proc, url = start_serve(*self.args)
        return url

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def post(url, body, timeout):
    req = urllib.request.Request(url + "/generate", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def arl_generate(url, prompts, new, rounds, timeout):
    sp = {"temperature": 0, "max_new_tokens": new, "min_new_tokens": new, "ignore_eos": True}
    post(url, {"input_ids": prompts[0], "sampling_params": dict(sp, max_new_tokens=4, min_new_tokens=4)}, timeout)
    best, toks = None, 0
    with ThreadPoolExecutor(len(prompts)) as ex:
        for _ in range(rounds):
            t0 = time.perf_counter()
            outs = list(ex.map(lambda p: post(url, {"input_ids": p, "sampling_params": sp}, timeout), prompts))
            dt = time.perf_counter() - t0
            toks = sum(o["meta_info"]["completion_tokens"] for o in outs)
            best = dt if best is None else min(best, dt)
            if dt > 60:  # slow enough that one round is the figure: time goes to the rest
                break
    return toks, best


def torch_generate(model_dir, prompts, new, rounds, dev, dtype):
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(dev).eval()
    ids = torch.tensor(prompts, device=dev)
    mask = torch.ones_like(ids)
    kw = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    with torch.no_grad():
        model.generate(ids[:1], attention_mask=mask[:1], **dict(kw, max_new_tokens=4, min_new_tokens=4))
        best = None
        for _ in range(rounds):
            sync(dev)
            t0 = time.perf_counter()
            out = model.generate(ids, attention_mask=mask, **kw)
            sync(dev)
            dt = time.perf_counter() - t0
            best = dt if best is None else min(best, dt)
            if dt > 60:
                break
    peak = torch.cuda.max_memory_allocated(dev) if dev.type == "cuda" else None
    toks = (out.shape[1] - ids.shape[1]) * ids.shape[0]
    del model
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return toks, best, peak


def check_generate(c, bindir, model_dir, shape, dev, work, arl_ok, env, dry):
    conc, plen, new, rounds = (4, 16, 16, 1) if dry else (32, 128, 128, 2)
    rng = random.Random(3)
    prompts = [[rng.randrange(2, shape["vocab_size"]) for _ in range(plen)] for _ in range(conc)]
    dtype_name = "float32" if dry else "bfloat16"
    label = f"{conc} requests × {new} new tokens (prompt {plen}), greedy, {dtype_name}"
    h_toks, h_dt, h_peak = torch_generate(model_dir, prompts, new, rounds, dev,
                                          torch.float32 if dry else torch.bfloat16)
    if arl_ok:
        try:
            with Served(bindir, model_dir, dev, dtype_name, conc, env, os.path.join(work, "serve.log")) as url:
                a_toks, a_dt = arl_generate(url, prompts, new, rounds, timeout=120 if dry else 240)
            a_rate = a_toks / a_dt
            ok = a_toks == conc * new
            c.row("generate", label, arl=fmt(a_rate, " tok/s"), torch_=fmt(h_toks / h_dt, " tok/s"),
                  note=f"arl/PyTorch {a_rate / (h_toks / h_dt):.2f}×" + ("" if ok else f"; arl gave {a_toks} tokens"), ok=ok)
        except Exception as e:  # noqa: BLE001 — any failure of the arl half is a row, not a crash
            c.row("generate", label, arl="failed", torch_=fmt(h_toks / h_dt, " tok/s"), note=str(e)[:300], ok=False)
    else:
        c.row("generate", label, torch_=fmt(h_toks / h_dt, " tok/s"), note="arl not run", ok=False)
    if h_peak is not None:
        c.row("generate", "peak GPU memory (allocated)", torch_=gib(h_peak), note="arl-serve: not measured")


# --- main --------------------------------------------------------------------------

def table(rows):
    out = ["| check | what | arl | PyTorch | note |", "|---|---|---|---|---|"]
    for r in rows:
        mark = "" if r["ok"] else "**FAIL** "
        cells = [r["check"], r["what"], r["arl"] or "—", r["pytorch"] or "—", mark + (r["note"] or "")]
        out.append("| " + " | ".join(str(x).replace("|", "/") for x in cells) + " |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", required=True, help="the bundle's (or the repository's) root: testdata/ is read there")
    ap.add_argument("--bin", required=True, help="directory of arl-train and arl-serve")
    ap.add_argument("--work", required=True, help="scratch directory (models, records, logs)")
    ap.add_argument("--json", required=True, help="where the results go")
    ap.add_argument("--dry-run", action="store_true", help="CPU, float32, tiny shapes")
    ap.add_argument("--only", default="load,logits,greedy,rl,generate", help="comma-separated subset of the checks")
    a = ap.parse_args()
    only = set(a.only.split(","))
    dev = torch.device("cpu" if a.dry_run else "cuda:0")
    if not a.dry_run and not torch.cuda.is_available():
        sys.exit("device-check: PyTorch sees no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    env = dict(os.environ)
    m = machine(dev)
    manifest = os.path.join(a.root, "MANIFEST.txt")
    m["bundle"] = open(manifest).readline().strip() if os.path.exists(manifest) else None
    c = Checks(a.json, dict(mode="dry-run" if a.dry_run else "gpu", machine=m,
                            date=time.strftime("%Y-%m-%d %H:%M:%S %Z")))
    t_start = time.time()
    arl_ok = True
    if "load" in only:
        arl_ok = check_load(c, a.bin, dev, env, os.path.join(a.root, "testdata/tiny-model"))
        if not arl_ok:
            log("arl's binaries do not start: the PyTorch half only")
    if "logits" in only:
        check_logits(c, a.root, a.bin, dev, a.work, arl_ok, env)
    if "greedy" in only:
        check_greedy(c, a.root, a.bin, dev, a.work, arl_ok, env)
    shape = DRY_SHAPE if a.dry_run else QWEN25_05B
    if only & {"rl", "generate"}:
        model_dir = os.path.join(a.work, "random-model")
        t0 = time.time()
        n = make_model(a.root, shape, torch.float32 if a.dry_run else torch.bfloat16, model_dir)
        m["random_model_params"] = n
        log(f"random model ({n / 1e6:.1f} M parameters) written in {time.time() - t0:.1f} s")
        if "rl" in only:
            check_rl(c, a.bin, model_dir, shape, dev, a.work, arl_ok, env, m, a.dry_run)
        if "generate" in only:
            check_generate(c, a.bin, model_dir, shape, dev, a.work, arl_ok, env, a.dry_run)
    m["seconds"] = round(time.time() - t_start, 1)
    result = c.save(complete=True)
    head = f"{m['gpu']} (driver {m.get('driver')})" if m.get("gpu") else m["cpu"]
    print(f"arl device check ({result['mode']}): {head}; torch {m['torch']} (CUDA {m['cuda']}); "
          f"transformers {m['transformers']}; {m['seconds']} s")
    print(table(c.rows))
    print("verdict: " + ("PASSED" if not c.failed else f"FAILED ({len(c.failed)}: {'; '.join(c.failed)})"))
    return 0 if not c.failed else 1


if __name__ == "__main__":
    sys.exit(main())
