#!/usr/bin/env python3
"""A fault-injecting HTTP proxy in front of a real arl-serve (scripts/chaos.sh).

Every K-th `POST /generate` (counting from the first) gets a fault instead of
the upstream answer; every other request, and every other path, is passed
through unchanged. Faults:

  5xx      HTTP 503 with a JSON error body
  always5xx  every /generate gets HTTP 503 (K is ignored)
  garbage  HTTP 200 with a body that is not JSON
  reset    the connection is reset (TCP RST) before any answer
  slow     the answer comes after --delay seconds (the client should time out)

This is a stand-in for a misbehaving server, not a server: the answers that
are not faults are the real server's. It writes its port to --port-file and,
on each request, one line to stderr: `<n> <path> <fault|pass>`.
Only the Python standard library is used.
"""
import argparse
import http.client
import http.server
import os
import socket
import struct
import sys
import threading
import time

ap = argparse.ArgumentParser()
ap.add_argument("--upstream", required=True, help="host:port of the real server")
ap.add_argument("--mode", required=True, choices=["5xx", "always5xx", "garbage", "reset", "slow"])
ap.add_argument("--every", type=int, default=3)
ap.add_argument("--delay", type=float, default=5.0)
ap.add_argument("--port-file", required=True)
args = ap.parse_args()
up_host, up_port = args.upstream.rsplit(":", 1)

lock = threading.Lock()
count = {"generate": 0}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, *a):
        pass

    def reply(self, status, data):
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def forward(self, method):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else None
        fault = None
        if self.path == "/generate" and method == "POST":
            with lock:
                count["generate"] += 1
                k = count["generate"]
            if args.mode == "always5xx" or k % args.every == 0:
                fault = args.mode
            print(f"{k} {self.path} {fault or 'pass'}", file=sys.stderr, flush=True)
        if fault in ("5xx", "always5xx"):
            self.reply(503, b'{"error": {"message": "injected fault: service unavailable"}}')
            return
        if fault == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
            return
        if fault == "slow":
            time.sleep(args.delay)
        if fault == "garbage":
            self.reply(200, b'{"text": "half an answer", "meta_info": {"output_token_logp')
            return
        conn = http.client.HTTPConnection(up_host, int(up_port), timeout=120)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
        try:
            conn.request(method, self.path, body=body, headers=headers)
            r = conn.getresponse()
            data = r.read()
        except OSError as e:
            self.reply(502, ('{"error": "upstream: %s"}' % e).encode())
            return
        finally:
            conn.close()
        try:
            self.send_response(r.status)
            for k, v in r.getheaders():
                if k.lower() not in ("connection", "transfer-encoding", "content-length"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass  # the client gave up (timeout): its retry is a new request

    def do_GET(self):
        self.forward("GET")

    def do_POST(self):
        self.forward("POST")


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256


srv = Server(("127.0.0.1", 0), Handler)
with open(args.port_file + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.replace(args.port_file + ".tmp", args.port_file)
srv.serve_forever()
