//! How a broker (or `ringlog users add --etcd`) reaches a secured etcd:
//! TLS with the CA that signed etcd's certificate and, when etcd asks for
//! one (`--client-cert-auth`), a client certificate; and/or an etcd user
//! and password (etcd's `auth enable`). The files are read when the
//! connection is made; their contents stay in the process — clients of
//! ringlog never see them, since they never talk to etcd.

use super::RegistryError;
use etcd_client::{Certificate, ConnectOptions, Identity, TlsOptions};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The credentials for etcd. All `None`: plain, unauthenticated etcd.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EtcdAccess {
    /// The CA certificates (PEM) that signed etcd's server certificate;
    /// set, the endpoints must be `https://`.
    pub ca: Option<PathBuf>,
    /// This client's certificate chain (PEM), with `key`.
    pub cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    pub key: Option<PathBuf>,
    /// An etcd user (etcd's own authentication), with `password_file`.
    pub user: Option<String>,
    /// The file whose first line is the etcd user's password.
    pub password_file: Option<PathBuf>,
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>, RegistryError> {
    std::fs::read(path).map_err(|e| RegistryError::Unavailable {
        reason: format!("reading the etcd {what} {}: {e}", path.display()),
    })
}

/// Settings for etcd that do not go together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccessError {
    /// A client certificate without its key, or a key alone.
    #[error("etcd_cert and etcd_key go together: set both, or neither")]
    CertWithoutKey,
    /// A client certificate, but no CA to check etcd's.
    #[error("etcd_cert needs etcd_ca (the CA that signed etcd's certificate)")]
    CertWithoutCa,
    /// A user without a password file, or a password file alone.
    #[error("etcd_user and etcd_password_file go together: set both, or neither")]
    UserWithoutPassword,
    /// A CA, and an endpoint that is not TLS.
    #[error("etcd endpoint {0} is not https:// but etcd_ca is set: TLS needs https:// endpoints")]
    PlainEndpoint(String),
    /// A TLS endpoint, and no CA to check its certificate.
    #[error("etcd endpoint {0} is https://: set etcd_ca to the CA that signed etcd's certificate")]
    SecureEndpointWithoutCa(String),
}

impl EtcdAccess {
    /// Checks that the settings go together and name https endpoints.
    pub fn check(&self, endpoints: &[String]) -> Result<(), AccessError> {
        if self.cert.is_some() != self.key.is_some() {
            return Err(AccessError::CertWithoutKey);
        }
        if self.cert.is_some() && self.ca.is_none() {
            return Err(AccessError::CertWithoutCa);
        }
        if self.user.is_some() != self.password_file.is_some() {
            return Err(AccessError::UserWithoutPassword);
        }
        if let Some(plain) = endpoints.iter().find(|e| !e.starts_with("https://")) {
            if self.ca.is_some() {
                return Err(AccessError::PlainEndpoint(plain.clone()));
            }
        }
        if let Some(secure) = endpoints.iter().find(|e| e.starts_with("https://")) {
            if self.ca.is_none() {
                return Err(AccessError::SecureEndpointWithoutCa(secure.clone()));
            }
        }
        Ok(())
    }

    /// The likely cause of an etcd failure that says `reason`, as words to
    /// add to it (empty when there is no likely cause to name): etcd closed
    /// a TLS connection that had no client certificate, refused a login, or
    /// refused this user the cluster's keys.
    pub fn hint_for(&self, reason: &str) -> String {
        let closed = [
            "connection closed",
            "broken pipe",
            "CertificateRequired",
            "BadCertificate",
        ]
        .iter()
        .any(|words| reason.contains(words));
        let hint = if self.ca.is_some() && self.cert.is_none() && closed {
            " (etcd closed the TLS connection: does it ask for client certificates? set etcd_cert and etcd_key)"
        } else if reason.contains("authentication failed") || reason.contains("invalid auth token")
        {
            " (check etcd_user and etcd_password_file)"
        } else if reason.contains("permission denied") {
            if let Some(user) = &self.user {
                return format!(" (etcd user {user:?} may not use this cluster's keys: give one of its roles readwrite on the cluster's prefix, `etcdctl role grant-permission ROLE readwrite --prefix /ringlog/CLUSTER/`)");
            }
            " (etcd has authentication enabled: set etcd_user and etcd_password_file, a user with access to the cluster's prefix)"
        } else if reason.contains("user name is empty") {
            " (etcd has authentication enabled: set etcd_user and etcd_password_file, a user with access to the cluster's prefix)"
        } else {
            ""
        };
        hint.to_string()
    }

    /// True when anything is set.
    pub fn is_secured(&self) -> bool {
        *self != EtcdAccess::default()
    }

    /// The etcd client's options: `timeout` for connects and requests,
    /// with TLS and the user when set.
    pub fn connect_options(&self, timeout: Duration) -> Result<ConnectOptions, RegistryError> {
        let mut options = ConnectOptions::new().with_connect_timeout(timeout);
        if let Some(ca) = &self.ca {
            let mut tls = TlsOptions::new().ca_certificate(Certificate::from_pem(read(ca, "CA")?));
            if let (Some(cert), Some(key)) = (&self.cert, &self.key) {
                tls = tls.identity(Identity::from_pem(
                    read(cert, "client certificate")?,
                    read(key, "client key")?,
                ));
            }
            options = options.with_tls(tls);
        }
        if let (Some(user), Some(file)) = (&self.user, &self.password_file) {
            let password = crate::password_file::read_password_file(file).map_err(|e| {
                RegistryError::Unavailable {
                    reason: e.to_string(),
                }
            })?;
            let password = String::from_utf8(password).map_err(|_| RegistryError::Unavailable {
                reason: format!("the etcd password in {} is not UTF-8", file.display()),
            })?;
            options = options.with_user(user.clone(), password);
        }
        Ok(options)
    }
}
