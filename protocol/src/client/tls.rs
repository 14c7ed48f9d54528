//! TLS for client connections (rustls, the `ring` provider).
//!
//! [`TlsConfig`] says whom to trust (a CA file), which name to expect (the
//! address's host unless set), and optionally which certificate the client
//! presents (for brokers that require client certificates). A
//! [`Stream`] is what a [`Connection`](super::Connection) reads and writes:
//! the plain socket, or the socket through one TLS session.
//!
//! A connection's reader and writer may live on different threads (a
//! producer's lane reads acknowledgements on its own thread), so the TLS
//! session is shared behind a mutex, held only while records are decrypted
//! or encrypted, never across a blocking socket call: the reader thread
//! blocks in `read` on its socket clone, the writer thread in `write` on its
//! own. Each side is used by one thread at a time.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// How a client connects with TLS.
///
/// ```no_run
/// use protocol::client::{ClientConfig, TlsConfig};
/// let tls = TlsConfig::new("ca.pem".as_ref())?
///     .with_client_certificate("client.pem".as_ref(), "client.key".as_ref())?;
/// let config = ClientConfig { tls: Some(tls), ..ClientConfig::default() };
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone)]
pub struct TlsConfig {
    ca: PathBuf,
    client: Option<(PathBuf, PathBuf)>,
    server_name: Option<String>,
    rustls: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig")
            .field("ca", &self.ca)
            .field("client", &self.client)
            .field("server_name", &self.server_name)
            .finish()
    }
}

impl PartialEq for TlsConfig {
    fn eq(&self, other: &Self) -> bool {
        self.ca == other.ca && self.client == other.client && self.server_name == other.server_name
    }
}

impl Eq for TlsConfig {}

fn invalid(path: &Path, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{}: {what}", path.display()),
    )
}

/// The certificates in a PEM file (at least one).
pub fn load_certificates(path: &Path) -> io::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| invalid(path, format!("reading certificates: {e}")))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(path, format!("reading certificates: {e}")))?;
    if certs.is_empty() {
        return Err(invalid(path, "no PEM certificate in the file"));
    }
    Ok(certs)
}

/// The private key in a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn load_private_key(path: &Path) -> io::Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path)
        .map_err(|e| invalid(path, format!("reading the private key: {e}")))
}

/// The crypto provider every ringlog TLS config uses.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl TlsConfig {
    /// Trusts the CA certificates in `ca` (PEM), presents no certificate.
    pub fn new(ca: &Path) -> io::Result<TlsConfig> {
        Ok(TlsConfig {
            ca: ca.to_path_buf(),
            client: None,
            server_name: None,
            rustls: build(ca, None)?,
        })
    }

    /// Presents the certificate chain in `cert` with the key in `key` (both
    /// PEM) to brokers that ask for one.
    pub fn with_client_certificate(mut self, cert: &Path, key: &Path) -> io::Result<TlsConfig> {
        self.rustls = build(&self.ca, Some((cert, key)))?;
        self.client = Some((cert.to_path_buf(), key.to_path_buf()));
        Ok(self)
    }

    /// Expects this name in the broker's certificate instead of the host of
    /// the address connected to (an IP address or a DNS name).
    pub fn with_server_name(mut self, name: &str) -> io::Result<TlsConfig> {
        ServerName::try_from(name.to_string()).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("server name {name:?}: {e}"),
            )
        })?;
        self.server_name = Some(name.to_string());
        Ok(self)
    }

    /// Starts a session with the broker at `address` (`host:port`).
    fn session(&self, address: &str) -> io::Result<rustls::ClientConnection> {
        let host = match &self.server_name {
            Some(name) => name.clone(),
            None => host_of(address).to_string(),
        };
        let name = ServerName::try_from(host.clone()).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("server name {host:?}: {e}"),
            )
        })?;
        rustls::ClientConnection::new(self.rustls.clone(), name).map_err(io::Error::other)
    }
}

/// A rustls client config trusting `ca`, presenting `client` if given.
fn build(ca: &Path, client: Option<(&Path, &Path)>) -> io::Result<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in load_certificates(ca)? {
        roots
            .add(cert)
            .map_err(|e| invalid(ca, format!("not a usable CA certificate: {e}")))?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(io::Error::other)?
        .with_root_certificates(roots);
    let config = match client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder
            .with_client_auth_cert(load_certificates(cert)?, load_private_key(key)?)
            .map_err(|e| invalid(key, format!("does not match {}: {e}", cert.display())))?,
    };
    Ok(Arc::new(config))
}

/// The host of `host:port`, `[v6]:port` or a bare host.
fn host_of(address: &str) -> &str {
    if let Some(rest) = address.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match address.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => address,
    }
}

type Session = Arc<Mutex<rustls::ClientConnection>>;

/// A connection's byte stream: the socket, or the socket through TLS.
pub struct Stream {
    socket: TcpStream,
    tls: Option<Session>,
    /// Bytes read from the socket that the session has not taken yet (it
    /// holds at most 16 KiB of decrypted data at a time).
    received: Vec<u8>,
}

fn lock(session: &Session) -> MutexGuard<'_, rustls::ClientConnection> {
    session
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn tls_error(error: rustls::Error) -> io::Error {
    use rustls::AlertDescription as Alert;
    let hint = match &error {
        rustls::Error::AlertReceived(Alert::CertificateRequired) => {
            " (the broker requires a client certificate)"
        }
        rustls::Error::AlertReceived(Alert::UnknownCA | Alert::BadCertificate) => {
            " (the broker does not trust this client's certificate)"
        }
        _ => "",
    };
    io::Error::new(io::ErrorKind::InvalidData, format!("TLS: {error}{hint}"))
}

impl Stream {
    /// A plain stream, or, with `tls`, one after a completed TLS handshake
    /// (bounded by the socket's read timeout).
    pub fn open(socket: TcpStream, tls: Option<&TlsConfig>, address: &str) -> io::Result<Stream> {
        let Some(tls) = tls else {
            return Ok(Stream {
                socket,
                tls: None,
                received: Vec::new(),
            });
        };
        let mut session = tls.session(address)?;
        let mut sock = &socket;
        while session.is_handshaking() {
            session.complete_io(&mut sock).map_err(|e| {
                if e.kind() == io::ErrorKind::InvalidData {
                    io::Error::new(e.kind(), format!("TLS handshake with {address}: {e}"))
                } else {
                    e
                }
            })?;
        }
        Ok(Stream {
            socket,
            tls: Some(Arc::new(Mutex::new(session))),
            received: Vec::new(),
        })
    }

    /// Another handle on the same stream (for a reader thread).
    pub fn try_clone(&self) -> io::Result<Stream> {
        Ok(Stream {
            socket: self.socket.try_clone()?,
            tls: self.tls.clone(),
            received: Vec::new(),
        })
    }

    /// The socket underneath.
    pub fn socket(&self) -> &TcpStream {
        &self.socket
    }

    /// True when the stream is encrypted.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(session) = &self.tls else {
            return self.socket.read(buf);
        };
        loop {
            {
                let mut s = lock(session);
                match s.reader().read(buf) {
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
                if !self.received.is_empty() {
                    // Decrypted data was drained: feed the session more.
                    let mut fed = &self.received[..];
                    let taken = s.read_tls(&mut fed)?;
                    self.received.drain(..taken);
                    s.process_new_packets().map_err(tls_error)?;
                    continue;
                }
            }
            // Blocking, without the lock: the writer goes on meanwhile.
            let mut raw = [0u8; 16 * 1024];
            let n = self.socket.read(&mut raw)?;
            if n == 0 {
                // Closed without a close_notify: a truncation, not an end.
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            self.received.extend_from_slice(&raw[..n]);
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let Some(session) = &self.tls else {
            return self.socket.write(buf);
        };
        let mut records = Vec::with_capacity(buf.len() + 64);
        let n = {
            let mut s = lock(session);
            let n = s.writer().write(buf)?;
            while s.wants_write() {
                s.write_tls(&mut records)?;
            }
            n
        };
        // Records leave in the order they were made: one writer per stream.
        self.socket.write_all(&records)?;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.socket.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::host_of;

    #[test]
    fn the_host_is_taken_from_every_address_form() {
        assert_eq!(host_of("127.0.0.1:9092"), "127.0.0.1");
        assert_eq!(host_of("broker-1.example:9092"), "broker-1.example");
        assert_eq!(host_of("[::1]:9092"), "::1");
        assert_eq!(host_of("localhost"), "localhost");
    }
}
