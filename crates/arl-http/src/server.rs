//! The one way arl's HTTP servers (`arl-serve`, `arl-env`) take connections:
//! a listener with a deep accept queue ([`listen`]) and an accept loop that
//! serves each connection with HTTP/1.1 and closes one whose request headers
//! do not arrive in time ([`accept_loop`]). A request body's time and size
//! are bounded by the [`crate::body`] reader in the server's routes.
use hyper_util::rt::{TokioIo, TokioTimer};
use std::time::Duration;
use tokio::net::{TcpListener, TcpSocket};

/// Binds with a deep accept queue: a rollout opening hundreds of connections
/// at once would overflow the usual 128 (the kernel caps it at somaxconn),
/// and the connections that do not fit are reset.
pub async fn listen(addr: &str) -> std::io::Result<TcpListener> {
    let mut last = None;
    for a in tokio::net::lookup_host(addr).await? {
        let sock = if a.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
        sock.set_reuseaddr(true)?;
        match sock.bind(a).and_then(|_| sock.listen(4096)) {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other(format!("`{addr}` resolves to no address"))))
}

/// Serves each connection with HTTP/1.1 on its own task, until the process
/// ends (it does not return). Unlike `axum::serve`, a connection whose
/// request headers do not arrive within `read_timeout` is closed (the body
/// has the same time again when the server reads it with
/// [`crate::body::buffer`]). A failed accept is reported on stderr as
/// `NAME: accept failed: …` (`name`: the program's name) and the loop goes on.
pub async fn accept_loop(name: &'static str, listener: TcpListener, app: axum::Router, read_timeout: Duration) {
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            // Out of file descriptors and the like: the next accept may succeed.
            Err(e) => {
                eprintln!("{name}: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let svc = hyper_util::service::TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let mut b = hyper::server::conn::http1::Builder::new();
            b.timer(TokioTimer::new()).header_read_timeout(read_timeout);
            // A client that goes away mid-request is its own business.
            let _ = b.serve_connection(TokioIo::new(stream), svc).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A connection stalled mid-header is closed after the read timeout,
    /// while a whole request on another connection is answered.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stalled_headers_are_cut_off_and_others_served() {
        let listener = listen("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new().route("/health", axum::routing::get(|| async { "ok" }));
        tokio::spawn(accept_loop("arl-http-test", listener, app, Duration::from_millis(300)));

        let t0 = std::time::Instant::now();
        let mut stalled = tokio::net::TcpStream::connect(addr).await.unwrap();
        stalled.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Half").await.unwrap();

        let mut ok = tokio::net::TcpStream::connect(addr).await.unwrap();
        ok.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
        let mut answer = String::new();
        ok.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("ok"), "{answer}");

        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), stalled.read_to_end(&mut rest)).await;
        assert!(read.is_ok(), "the stalled connection is still open after 10 s");
        assert!(t0.elapsed() >= Duration::from_millis(300), "closed before the timeout: {:?}", t0.elapsed());
    }
}
