"""arl-serve vs transformers.generate: same weights, prompts, batch and lengths.

usage: serve_bench.py URL MODEL_DIR CONC NEW PROMPT DEVICE [REPEAT]

Each side runs the same batch REPEAT times (default 5) after a warm-up; the
best round counts (shared machines make single rounds noisy), the median is
printed next to it.
"""
import asyncio, json, random, statistics, sys, time

import aiohttp
import torch
from transformers import AutoModelForCausalLM

url, model_dir, conc, new, plen, device = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
repeat = int(sys.argv[7]) if len(sys.argv) > 7 else 5
cfg = json.load(open(f"{model_dir}/config.json"))
rng = random.Random(0)
prompts = [[rng.randrange(10, cfg["vocab_size"]) for _ in range(plen)] for _ in range(conc)]


async def arl_run():
    # min_new_tokens as well as ignore_eos: transformers' min_new_tokens bans
    # EOS until then, ignore_eos alone only keeps going past it; with both,
    # both sides pick from the same candidates.
    sp = {"temperature": 0, "max_new_tokens": new, "min_new_tokens": new, "ignore_eos": True}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3600)) as s:
        async def one(p):
            async with s.post(f"{url}/generate", json={"input_ids": p, "sampling_params": sp}) as r:
                return await r.json()
        # warm-up (first-call allocations), then the measured round
        await one(prompts[0])
        dts = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            outs = await asyncio.gather(*(one(p) for p in prompts))
            dts.append(time.perf_counter() - t0)
    toks = sum(o["meta_info"]["completion_tokens"] for o in outs)
    return toks, dts, [o["output_ids"] for o in outs]


toks_a, dt_a, out_a = asyncio.run(arl_run())
dts_a_all = dt_a

torch.manual_seed(0)
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device).eval()
ids = torch.tensor(prompts, device=device)
mask = torch.ones_like(ids)
kw = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)
with torch.no_grad():
    model.generate(ids[:1], attention_mask=mask[:1], **kw)  # warm-up
    dts_h = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = model.generate(ids, attention_mask=mask, **kw)
        dts_h.append(time.perf_counter() - t0)
toks_h = (out.shape[1] - plen) * conc
same = sum(out[i, plen:].tolist() == out_a[i] for i in range(conc))

dt_a, dt_h = min(dt_a), min(dts_h)
med_a, med_h = statistics.median(toks_a / d for d in dts_a_all), statistics.median(toks_h / d for d in dts_h)
rate_a, rate_h = toks_a / dt_a, toks_h / dt_h
print(f"{conc} concurrent requests, prompt {plen} tokens, {new} new tokens each, device {device}, float32, greedy, best of {repeat} rounds")
print(f"arl-serve            {toks_a:7d} tokens  {dt_a:8.3f} s  {rate_a:10.1f} tokens/s  (median {med_a:.1f})")
print(f"transformers.generate {toks_h:6d} tokens  {dt_h:8.3f} s  {rate_h:10.1f} tokens/s  (median {med_h:.1f})")
print(f"ratio arl/HF: {rate_a / rate_h:.2f}x best, {med_a / med_h:.2f}x median   (identical greedy outputs: {same}/{conc})")
