//! Reading request bodies in the HTTP servers (`arl-serve`, `arl-env`):
//! bounded in size and in time, and refusing an oversized body in a way the
//! client can read.
//!
//! A server that answers 413 and closes while the client is still sending
//! makes the kernel reset the connection (unread data in the receive
//! buffer), and the client sees a broken connection instead of the 413. So an
//! oversized body is read on and thrown away, up to [`DRAIN_BYTES`] past the
//! limit (and within the same deadline), before the answer goes out with
//! `Connection: close`. A body announced larger than that is refused at once
//! (reading megabytes only to refuse them would be the abuse winning).
use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{header, HeaderValue};
use axum::response::Response;
use http_body_util::BodyExt;
use std::time::Duration;

/// An oversized body is drained up to this many bytes past the limit.
pub const DRAIN_BYTES: u64 = 1 << 20;

/// Why a body was not accepted.
#[derive(Debug)]
pub enum BodyError {
    /// Larger than the limit (announced or counted).
    TooLarge,
    /// Not received within the deadline.
    Timeout,
    /// The connection failed while reading.
    Broken(String),
}

/// Reads the whole body of `req` (at most `limit` bytes, within `timeout`)
/// and returns the request with the body buffered.
pub async fn buffer(req: Request, limit: usize, timeout: Duration) -> Result<Request, BodyError> {
    let limit = limit as u64;
    let announced = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let drain_cap = limit.saturating_add(DRAIN_BYTES);
    if announced.is_some_and(|n| n > drain_cap) {
        return Err(BodyError::TooLarge);
    }
    let (parts, mut body) = req.into_parts();
    let mut over = announced.is_some_and(|n| n > limit);
    let read = async {
        let mut buf: Vec<u8> = Vec::new();
        let mut seen = 0u64;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| BodyError::Broken(e.to_string()))?;
            let Ok(data) = frame.into_data() else { continue };
            seen += data.len() as u64;
            if seen > limit {
                over = true;
            }
            if over {
                if seen > drain_cap {
                    break;
                }
                continue;
            }
            buf.extend_from_slice(&data);
        }
        Ok(buf)
    };
    let got = tokio::time::timeout(timeout, read).await;
    if over {
        return Err(BodyError::TooLarge);
    }
    match got {
        Err(_) => Err(BodyError::Timeout),
        Ok(Err(e)) => Err(e),
        Ok(Ok(buf)) => Ok(Request::from_parts(parts, Body::from(Bytes::from(buf)))),
    }
}

/// Marks a refusal so that the server closes the connection after it.
pub fn closing(mut r: Response) -> Response {
    r.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}
