//! The one way arl builds its HTTP clients (the SGLang client, judges and
//! remote rewards, SandboxFusion, OpenAPI tools, weight sync), so every one of
//! them speaks `https://` the same way: rustls with the `ring` provider, the
//! system's root certificates (the platform verifier; on Linux it honours
//! `SSL_CERT_FILE` and `SSL_CERT_DIR`, so a private CA is trusted by pointing
//! them at it).
use std::sync::Once;

/// Installs `ring` as rustls' process-wide crypto provider (once). reqwest is
/// built without a provider of its own (`rustls-no-provider`): `aws-lc-rs`,
/// its default, is a much larger C build.
fn install_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // Err: another provider is installed already, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// An async client builder with HTTPS support.
pub fn builder() -> reqwest::ClientBuilder {
    install_provider();
    reqwest::Client::builder()
}

/// A blocking client builder with HTTPS support. Like every blocking reqwest
/// client it must not be built or dropped inside an async runtime.
pub fn blocking_builder() -> reqwest::blocking::ClientBuilder {
    install_provider();
    reqwest::blocking::Client::builder()
}

/// What went wrong with a request, in the words a user needs: the innermost
/// cause ("Connection refused", "invalid peer certificate: UnknownIssuer"),
/// not reqwest's outer "error sending request"; timeouts say so.
pub fn why(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    let mut src: Option<&dyn std::error::Error> = std::error::Error::source(e);
    while let Some(c) = src {
        s = c.to_string();
        src = c.source();
    }
    if e.is_timeout() {
        format!("timed out ({s})")
    } else {
        s
    }
}
