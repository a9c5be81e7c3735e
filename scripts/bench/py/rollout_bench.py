"""Client-side cost of rollout: arl-rollout vs a Python asyncio + aiohttp client
(slime's way: one POST /generate per sample, the prompt tokenised in the
rollout coroutine, input_ids in, logprobs out, a record per sample out),
against the same zero-latency SGLang-shaped server, same requests, same
concurrency, in one run. Used by scripts/bench/rollout.sh.

The server is a minimal asyncio HTTP/1.1 keep-alive server answering every
request with one canned /generate body (so the clients are what is measured);
it runs in its own process.

usage: [ROUNDS=3] rollout_bench.py ARL_ROLLOUT N CONCURRENCY OUT_TOKENS
"""
import asyncio
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ARL, N, CONC, OUT = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
ROUNDS = int(os.environ.get("ROUNDS", "3"))


def byte_chars():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    m = dict(zip(bs, cs))
    return [chr(m[b]) for b in range(256)]


def write_model(d):
    def added(i, c, special):
        return {"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": special}

    tok = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added(256, "<|endoftext|>", True), added(257, "<|im_start|>", True), added(258, "<|im_end|>", True),
                         added(259, "<tool_call>", False), added(260, "</tool_call>", False)],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {c: i for i, c in enumerate(byte_chars())}, "merges": []},
    }
    tmpl = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
            "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
    json.dump(tok, open(os.path.join(d, "tokenizer.json"), "w"))
    json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>", "chat_template": tmpl},
              open(os.path.join(d, "tokenizer_config.json"), "w"))


SERVER = r'''
import asyncio, json, sys
OUT = int(sys.argv[2])
ids = [65 + (i * 7) % 26 for i in range(OUT - 1)] + [258]
body = json.dumps({"text": "x", "output_ids": ids, "meta_info": {"id": "r", "finish_reason": {"type": "stop", "matched": 258},
    "prompt_tokens": 40, "completion_tokens": OUT, "cached_tokens": 0, "weight_version": "1",
    "output_token_logprobs": [[-0.125 - (i % 5) / 8, t, None] for i, t in enumerate(ids)]}}).encode()
resp = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body
class P(asyncio.Protocol):
    def connection_made(self, t):
        self.t, self.buf = t, b""
    def data_received(self, d):
        self.buf += d
        while True:
            i = self.buf.find(b"\r\n\r\n")
            if i < 0:
                return
            head = self.buf[:i].lower()
            j = head.find(b"content-length:")
            n = int(head[j + 15:].split(b"\r\n")[0]) if j >= 0 else 0
            if len(self.buf) < i + 4 + n:
                return
            self.buf = self.buf[i + 4 + n:]
            self.t.write(resp)
async def main():
    srv = await asyncio.get_running_loop().create_server(P, "127.0.0.1", int(sys.argv[1]), backlog=1024)
    print("ready", flush=True)
    await srv.serve_forever()
asyncio.run(main())
'''

PY_CLIENT = r'''
import asyncio, json, resource, sys, time
import aiohttp
from tokenizers import Tokenizer
url, n, conc, model = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
tok = Tokenizer.from_file(model + "/tokenizer.json")
texts = ["<|im_start|>user\nTask %d: say hello.<|im_end|>\n<|im_start|>assistant\n" % i for i in range(n)]
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
def sys_cpu():
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime
# What tokenising alone costs (reported, not counted: the loop below does it again).
c0 = cpu()
for t in texts:
    tok.encode(t, add_special_tokens=False)
tok_cpu = cpu() - c0
out = sys.stdout
async def one(session, sem, i):
    async with sem:
        # As slime's generate: the prompt is tokenised per sample, inside the rollout.
        prompt = tok.encode(texts[i], add_special_tokens=False).ids
        payload = {"rid": "py-%d" % i, "input_ids": prompt, "return_logprob": True,
                   "sampling_params": {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 4096, "no_stop_trim": True,
                                       "skip_special_tokens": False, "spaces_between_special_tokens": False}}
        async with session.post(url + "/generate", json=payload) as r:
            d = await r.json()
    lp = d["meta_info"]["output_token_logprobs"]
    ids = [e[1] for e in lp]
    rec = {"prompt_id": "p%d" % i, "sample_index": 0, "tokens": prompt + ids, "prompt_len": len(prompt),
           "response": tok.decode(ids, skip_special_tokens=False), "loss_mask": [1] * len(ids),
           "rollout_log_probs": [e[0] for e in lp], "status": "completed",
           "finish_reason": d["meta_info"]["finish_reason"]["type"], "turns": 1, "tool_calls": 0,
           "weight_versions": [d["meta_info"]["weight_version"]]}
    out.write(json.dumps(rec) + "\n")
async def main():
    sem = asyncio.Semaphore(conc)
    conn = aiohttp.TCPConnector(limit=conc)
    async with aiohttp.ClientSession(connector=conn) as s:
        await asyncio.gather(*(one(s, sem, i) for i in range(n)))
c0 = cpu(); s0 = sys_cpu(); t0 = time.time()
asyncio.run(main())
c1 = cpu(); s1 = sys_cpu(); t1 = time.time()
print(json.dumps({"wall": t1 - t0, "cpu": c1 - c0, "sys": s1 - s0, "tok_cpu": tok_cpu}), file=sys.stderr)
'''


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def children_sys():
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_stime


def main():
    work = tempfile.mkdtemp(prefix="arl-bench-rollout-")
    model = os.path.join(work, "model")
    os.makedirs(model)
    write_model(model)
    with open(os.path.join(work, "prompts.jsonl"), "w") as f:
        for i in range(N):
            f.write(json.dumps({"id": "p%d" % i, "prompt": "Task %d: say hello." % i}) + "\n")
    open(os.path.join(work, "server.py"), "w").write(SERVER)
    open(os.path.join(work, "client.py"), "w").write(PY_CLIENT)
    port = free_port()
    srv = subprocess.Popen([sys.executable, os.path.join(work, "server.py"), str(port), str(OUT)], stdout=subprocess.PIPE)
    srv.stdout.readline()
    url = "http://127.0.0.1:%d" % port
    def run_arl(prompts):
        # The whole process (startup, tokenizer, template, I/O) is counted.
        c0, s0, t0 = children_cpu(), children_sys(), time.time()
        subprocess.run([ARL, "-i", prompts, "--endpoint", url, "--tokenizer", model,
                        "--concurrency", str(CONC), "-q"], stdout=subprocess.DEVNULL, check=True)
        return {"wall": time.time() - t0, "cpu": children_cpu() - c0, "sys": children_sys() - s0}

    def run_py(n):
        # The rollout loop is counted (tokenising each prompt in it, as slime
        # does); imports and loading the tokenizer are not.
        p = subprocess.run([sys.executable, os.path.join(work, "client.py"), url, str(n), str(CONC), model],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=True)
        return json.loads(p.stderr.decode().strip().splitlines()[-1])

    try:
        # Warm the server up (a fresh asyncio server answers its first
        # thousands of requests more slowly, and a slower server costs any
        # client more wake-ups per request), then alternate the two clients.
        warm = os.path.join(work, "warm.jsonl")
        with open(warm, "w") as f:
            for i in range(min(N, 2000)):
                f.write(json.dumps({"id": "w%d" % i, "prompt": "Warm-up %d." % i}) + "\n")
        run_arl(warm)
        run_py(min(N, 2000))
        arls, pys = [], []
        for _ in range(ROUNDS):
            arls.append(run_arl(os.path.join(work, "prompts.jsonl")))
            pys.append(run_py(N))
    finally:
        srv.kill()
        shutil.rmtree(work, ignore_errors=True)

    def median(runs, key):
        v = sorted(r[key] for r in runs)
        return v[len(v) // 2]

    arl = {k: median(arls, k) for k in ("wall", "cpu", "sys")}
    py = {k: median(pys, k) for k in ("wall", "cpu", "sys")}
    print("%d requests, concurrency %d, %d output tokens each; median of %d alternating runs per client" % (N, CONC, OUT, ROUNDS))
    print("%-22s %12s %16s %12s   %s" % ("client", "requests/s", "CPU µs/request", "of it kernel", "CPU µs/request, each run"))
    for name, m, runs in (("arl-rollout", arl, arls), ("python asyncio+aiohttp", py, pys)):
        print("%-22s %12.0f %16.1f %12.1f   %s" % (name, N / m["wall"], 1e6 * m["cpu"] / N, 1e6 * m["sys"] / N,
                                              " ".join("%.1f" % (1e6 * r["cpu"] / N) for r in runs)))
    tok = median(pys, "tok_cpu")
    print("(of python's CPU per request, tokenising the prompt: %.1f µs; arl's figure includes its start, reading the"
          " prompts, the chat template and tokenising)" % (1e6 * tok / N))
    print("ratios arl/python: requests/s %.2fx, CPU per request %.2fx less" % (py["wall"] / arl["wall"], py["cpu"] / max(arl["cpu"], 1e-9)))

main()
