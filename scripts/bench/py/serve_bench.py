"""arl-serve vs transformers.generate: same weights, prompts, batch and lengths.

usage: serve_bench.py URL MODEL_DIR CONC NEW PROMPT DEVICE
"""
import asyncio, json, random, sys, time

import aiohttp
import torch
from transformers import AutoModelForCausalLM

url, model_dir, conc, new, plen, device = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
cfg = json.load(open(f"{model_dir}/config.json"))
rng = random.Random(0)
prompts = [[rng.randrange(10, cfg["vocab_size"]) for _ in range(plen)] for _ in range(conc)]


async def arl_run():
    sp = {"temperature": 0, "max_new_tokens": new, "ignore_eos": True}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3600)) as s:
        async def one(p):
            async with s.post(f"{url}/generate", json={"input_ids": p, "sampling_params": sp}) as r:
                return await r.json()
        # warm-up (first-call allocations), then the measured round
        await one(prompts[0])
        t0 = time.perf_counter()
        outs = await asyncio.gather(*(one(p) for p in prompts))
        dt = time.perf_counter() - t0
    toks = sum(o["meta_info"]["completion_tokens"] for o in outs)
    return toks, dt, [o["output_ids"] for o in outs]


toks_a, dt_a, out_a = asyncio.run(arl_run())

torch.manual_seed(0)
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device).eval()
ids = torch.tensor(prompts, device=device)
mask = torch.ones_like(ids)
kw = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)
with torch.no_grad():
    model.generate(ids[:1], attention_mask=mask[:1], **kw)  # warm-up
    t0 = time.perf_counter()
    out = model.generate(ids, attention_mask=mask, **kw)
    dt_h = time.perf_counter() - t0
toks_h = (out.shape[1] - plen) * conc
same = sum(out[i, plen:].tolist() == out_a[i] for i in range(conc))

rate_a, rate_h = toks_a / dt_a, toks_h / dt_h
print(f"{conc} concurrent requests, prompt {plen} tokens, {new} new tokens each, device {device}, float32, greedy")
print(f"arl-serve            {toks_a:7d} tokens  {dt_a:8.3f} s  {rate_a:10.1f} tokens/s")
print(f"transformers.generate {toks_h:6d} tokens  {dt_h:8.3f} s  {rate_h:10.1f} tokens/s")
print(f"ratio arl/HF: {rate_a / rate_h:.2f}x   (identical greedy outputs: {same}/{conc})")
