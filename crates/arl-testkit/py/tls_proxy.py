"""A TLS terminator for the HTTPS tests (a stand-in for the TLS front of a
hosted service): accepts TLS on a free loopback port with the given
certificate and key, and forwards the decrypted bytes to a plain-HTTP server
on loopback. Prints `tls_proxy: listening on PORT` to stderr when ready.

usage: python3 tls_proxy.py CERT KEY BACKEND_PORT
"""
import socket
import ssl
import sys
import threading


def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def serve(conn, ctx, backend):
    try:
        tls = ctx.wrap_socket(conn, server_side=True)
    except (ssl.SSLError, OSError) as e:
        # A client that does not trust the certificate hangs up here.
        print(f"tls_proxy: handshake failed: {e}", file=sys.stderr, flush=True)
        conn.close()
        return
    up = socket.create_connection(("127.0.0.1", backend))
    threading.Thread(target=pump, args=(tls, up), daemon=True).start()
    pump(up, tls)


def main():
    cert, key, backend = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    srv = socket.create_server(("127.0.0.1", 0))
    print(f"tls_proxy: listening on {srv.getsockname()[1]}", file=sys.stderr, flush=True)
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=serve, args=(conn, ctx, backend), daemon=True).start()


if __name__ == "__main__":
    main()
