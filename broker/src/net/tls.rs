//! TLS for client connections (issue 8, item 21).
//!
//! With `tls_cert` and `tls_key` set, every shard's listener speaks TLS only
//! (rustls, `ring` provider, TLS 1.2 and 1.3); with `tls_client_ca` as well,
//! a client must present a certificate signed by that CA. The TLS handshake
//! counts against `handshake_timeout_ms`, like the protocol's own.
//!
//! **Zero-copy under TLS.** `sendfile` moves file pages to the socket
//! untouched, and TLS must encrypt them, so a TLS connection's fetch reads
//! the bytes (from the page cache, or off the shard's thread when cold —
//! `cold.rs`) and writes them through the session: one copy and the
//! encryption per byte, where plain TCP has none. Kernel TLS (`setsockopt
//! TCP_ULP "tls"` with the session keys handed to the kernel after the
//! handshake) would keep `sendfile` with the encryption in the kernel; this
//! machine's kernel has no `tls` module, so it is left for one that has it
//! (design: `docs/design/0008-tls.md`).

use crate::config::Config;
use anyhow::Context;
use futures_rustls::rustls;
use futures_rustls::rustls::pki_types::pem::PemObject;
use futures_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use futures_rustls::{TlsAcceptor, TlsConnector};
use std::path::Path;
use std::sync::{Arc, OnceLock};

static ACCEPTOR: OnceLock<Option<TlsAcceptor>> = OnceLock::new();
static CONNECTOR: OnceLock<Option<TlsConnector>> = OnceLock::new();

fn certificates(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("reading certificates from {}", path.display()))?;
    anyhow::ensure!(
        !certs.is_empty(),
        "{}: no PEM certificate in the file",
        path.display()
    );
    Ok(certs)
}

/// The server's TLS configuration from `config`, or `None` for plain TCP.
pub fn server_config(config: &Config) -> anyhow::Result<Option<Arc<rustls::ServerConfig>>> {
    let (Some(cert), Some(key)) = (&config.tls_cert, &config.tls_key) else {
        return Ok(None);
    };
    let chain = certificates(cert)?;
    let key = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("reading the private key from {}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?;
    let builder = match &config.tls_client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in certificates(ca)? {
                roots
                    .add(cert)
                    .with_context(|| format!("{}: not a usable CA certificate", ca.display()))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(roots));
            // With `scram_or_tls`, a client may log in with SCRAM instead
            // of presenting a certificate; one it presents is still checked.
            let verifier = if config.authentication == crate::config::Authentication::ScramOrTls {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            let verifier = verifier
                .build()
                .with_context(|| format!("client CA {}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let server = builder
        .with_single_cert(chain, key)
        .with_context(|| format!("{} and its key", cert.display()))?;
    Ok(Some(Arc::new(server)))
}

/// The TLS configuration of this broker's connections to other brokers (a
/// follower's to its leaders), or `None` for plain TCP: when the listeners
/// speak TLS, so do the other brokers' (the cluster is configured alike).
/// The leader's certificate is checked against `tls_peer_ca` (default
/// `tls_client_ca`) for the host it advertises; this broker's own
/// certificate goes with it, for leaders that require client certificates.
pub fn peer_config(config: &Config) -> anyhow::Result<Option<Arc<rustls::ClientConfig>>> {
    let (Some(cert), Some(key)) = (&config.tls_cert, &config.tls_key) else {
        return Ok(None);
    };
    let Some(ca) = config
        .tls_peer_ca
        .as_ref()
        .or(config.tls_client_ca.as_ref())
    else {
        // A standalone broker follows nobody.
        return Ok(None);
    };
    let mut roots = rustls::RootCertStore::empty();
    for certificate in certificates(ca)? {
        roots
            .add(certificate)
            .with_context(|| format!("{}: not a usable CA certificate", ca.display()))?;
    }
    let chain = certificates(cert)?;
    let key = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("reading the private key from {}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .with_context(|| format!("{} and its key, as a client certificate", cert.display()))?;
    Ok(Some(Arc::new(client)))
}

/// Loads the TLS configuration once, at start, for every shard.
pub fn init(config: &Config) -> anyhow::Result<()> {
    let acceptor = server_config(config)?.map(TlsAcceptor::from);
    let _ = ACCEPTOR.set(acceptor);
    let connector = peer_config(config)?.map(TlsConnector::from);
    let _ = CONNECTOR.set(connector);
    Ok(())
}

/// The connector for connections to other brokers, when they speak TLS.
pub fn connector() -> Option<TlsConnector> {
    CONNECTOR.get().cloned().flatten()
}

/// The acceptor, when the broker speaks TLS.
pub fn acceptor() -> Option<TlsAcceptor> {
    ACCEPTOR.get().cloned().flatten()
}
