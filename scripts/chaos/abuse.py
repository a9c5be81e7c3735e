#!/usr/bin/env python3
"""Abuse of a running arl-serve or arl-env (scripts/chaos.sh): one check per
call, one JSON line on stdout with what was observed. Standard library only.

  abuse.py PORT flood N        N concurrent /generate requests on N connections,
                               and a probe request while they are in flight
  abuse.py PORT idle N         N connections that send half a request and
                               stall; a probe must still be answered
  abuse.py PORT slow N SECS    N connections that stall (half mid-header, half
                               mid-body) against a server with --read-timeout
                               SECS: each must be closed by the server in time;
                               a probe while they stall and one after
  abuse.py PORT body BYTES     one /generate body of BYTES bytes
  abuse.py PORT malformed      bodies that are not JSON / not objects / wrong types
  abuse.py PORT key KEY        a request with KEY as its bearer token
  abuse.py PORT million        a million new tokens, and a million input ids

The probe is a normal request that must be answered: a short /generate. With
ABUSE_TARGET=env the server is an arl-env: the probe is GET /health, and the
stalled requests of `idle` and `slow` go to POST /episodes (the other checks
are arl-serve's).
"""
import asyncio
import json
import os
import sys
import time

PORT = int(sys.argv[1])
CMD = sys.argv[2]
ARGS = sys.argv[3:]
# The right key, for the checks that are not about the key.
KEY = os.environ.get("ARL_API_KEY")
# `serve` (arl-serve) or `env` (arl-env).
TARGET = os.environ.get("ABUSE_TARGET", "serve")
# Where the stalled requests go.
STALL_PATH = "/episodes" if TARGET == "env" else "/generate"


def gen_body(max_new=4, extra=None):
    b = {"text": "What is 2+3?", "sampling_params": {"max_new_tokens": max_new, "temperature": 0}}
    if extra:
        b.update(extra)
    return json.dumps(b).encode()


async def request(path, body, key=None, timeout=120.0, raw=None, method="POST"):
    """One HTTP/1.1 request on its own connection; returns (status, body bytes)."""
    r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", PORT), timeout)
    try:
        k = key if key is not None else KEY
        head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
        if k:
            head += f"Authorization: Bearer {k}\r\n"
        head += f"Content-Length: {len(body)}\r\n\r\n"
        w.write(head.encode())
        # Big bodies go in pieces; the server may answer 413 and close early.
        for i in range(0, len(body), 1 << 20):
            w.write(body[i:i + (1 << 20)])
            try:
                await asyncio.wait_for(w.drain(), timeout)
            except (ConnectionError, OSError):
                break
        data = await asyncio.wait_for(r.read(), timeout)
    finally:
        w.close()
    line = data.split(b"\r\n", 1)[0].split()
    status = int(line[1]) if len(line) > 1 else 0
    return status, data.split(b"\r\n\r\n", 1)[-1]


async def probe():
    t = time.time()
    try:
        if TARGET == "env":
            s, b = await request("/health", b"", timeout=60, method="GET")
            ok = s == 200 and json.loads(b).get("ok") is True
        else:
            s, b = await request("/generate", gen_body(), timeout=60)
            ok = s == 200 and "text" in json.loads(b)
    except Exception:
        ok = False
    return ok, time.time() - t


async def flood(n):
    async def one():
        try:
            s, b = await request("/generate", gen_body(4), timeout=300)
            return s
        except Exception as e:
            return type(e).__name__
    tasks = [asyncio.create_task(one()) for _ in range(n)]
    await asyncio.sleep(0.5)
    p_ok, p_s = await probe()
    res = await asyncio.gather(*tasks)
    counts = {}
    for s in res:
        counts[str(s)] = counts.get(str(s), 0) + 1
    return {"statuses": counts, "probe_ok": p_ok, "probe_s": round(p_s, 2)}


async def idle(n):
    conns = []
    opened = 0
    for _ in range(n):
        try:
            r, w = await asyncio.open_connection("127.0.0.1", PORT)
            w.write(f"POST {STALL_PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n".encode() + b'{"te')
            conns.append(w)
            opened += 1
        except OSError:
            break
    await asyncio.sleep(0.5)
    p_ok, p_s = await probe()
    for w in conns:
        w.close()
    return {"opened": opened, "probe_ok": p_ok, "probe_s": round(p_s, 2)}


async def slow(n, secs):
    async def one(kind):
        t = time.time()
        r, w = await asyncio.open_connection("127.0.0.1", PORT)
        if kind == "header":
            w.write(f"POST {STALL_PATH} HTTP/1.1\r\nHost: x\r\nContent-Le".encode())
        else:
            auth = f"Authorization: Bearer {KEY}\r\n" if KEY else ""
            w.write((f"POST {STALL_PATH} HTTP/1.1\r\nHost: x\r\n{auth}"
                     f"Content-Length: 100\r\n\r\n").encode() + b'{"te')
        await w.drain()
        try:
            data = await asyncio.wait_for(r.read(), secs * 3 + 10)  # until the server closes
            closed = True
        except (asyncio.TimeoutError, OSError):
            data, closed = b"", False
        took = time.time() - t
        w.close()
        parts = data.split()
        status = int(parts[1]) if data.startswith(b"HTTP/") and len(parts) > 1 else None
        return kind, closed, took, status

    tasks = [asyncio.create_task(one("header" if i % 2 == 0 else "body")) for i in range(n)]
    # A normal request while they stall (well within the read timeout).
    await asyncio.sleep(min(0.5, secs / 4))
    during_ok, _ = await probe()
    res = await asyncio.gather(*tasks)
    p_ok, p_s = await probe()
    out = {"n": n, "closed": sum(1 for _, c, _, _ in res if c),
           "max_s": round(max(t for _, _, t, _ in res), 2), "probe_during_ok": during_ok, "probe_ok": p_ok}
    for kind in ("header", "body"):
        st = {}
        for k, _, _, s in res:
            if k == kind:
                st[str(s)] = st.get(str(s), 0) + 1
        out[kind + "_statuses"] = st
    return out


async def body(nbytes):
    """Announces BYTES of body, sends the first 64 KiB, and reads the answer:
    a server that checks the length answers before the rest is sent."""
    r, w = await asyncio.open_connection("127.0.0.1", PORT)
    head = (f"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {KEY}\r\nContent-Length: {nbytes}\r\n\r\n")
    w.write(head.encode() + b'{"text": "' + b"a" * (64 << 10))
    try:
        await w.drain()
        line = await asyncio.wait_for(r.readline(), 20)
        parts = line.split()
        s = int(parts[1]) if len(parts) > 1 else 0
    except Exception as e:
        s = type(e).__name__
    finally:
        w.close()
    p_ok, _ = await probe()
    return {"status": s, "probe_ok": p_ok}


async def malformed():
    cases = {
        "not_json": b"{not json",
        "array": b"[1, 2, 3]",
        "empty": b"",
        "bad_utf8": b'{"text": "\xff\xfe"}',
        "wrong_type": b'{"text": 5}',
        "bad_sampling": b'{"text": "hi", "sampling_params": {"max_new_tokens": "many"}}',
        "bad_ids": b'{"input_ids": [1, -7, "x"]}',
        "huge_id": b'{"input_ids": [99999999]}',
    }
    out = {}
    for k, b in cases.items():
        try:
            s, _ = await request("/generate", b, timeout=30)
        except Exception as e:
            s = type(e).__name__
        out[k] = s
    p_ok, _ = await probe()
    return {"statuses": out, "probe_ok": p_ok}


async def key(k):
    s, _ = await request("/generate", gen_body(), key=k)
    s2, _ = await request("/get_model_info", b"", key=k)
    p_ok, _ = await probe()
    return {"generate": s, "model_info": s2, "probe_ok": p_ok}


async def million():
    t = time.time()
    s1, b1 = await request("/generate", gen_body(1_000_000), timeout=300)
    d1 = time.time() - t
    out_len = None
    if s1 == 200:
        out_len = json.loads(b1)["meta_info"].get("completion_tokens")
    ids = json.dumps({"input_ids": [1] * 1_000_000, "sampling_params": {"max_new_tokens": 1}}).encode()
    s2, _ = await request("/generate", ids, timeout=120)
    p_ok, _ = await probe()
    return {"new_tokens_status": s1, "completion_tokens": out_len, "seconds": round(d1, 2),
            "input_ids_status": s2, "probe_ok": p_ok}


async def main():
    if CMD == "flood":
        r = await flood(int(ARGS[0]))
    elif CMD == "idle":
        r = await idle(int(ARGS[0]))
    elif CMD == "slow":
        r = await slow(int(ARGS[0]), float(ARGS[1]))
    elif CMD == "body":
        r = await body(int(ARGS[0]))
    elif CMD == "malformed":
        r = await malformed()
    elif CMD == "key":
        r = await key(ARGS[0])
    elif CMD == "million":
        r = await million()
    else:
        sys.exit(f"unknown check {CMD}")
    print(json.dumps(r))


asyncio.run(main())
