//! Certificates for the TLS tests, made fresh for each test: a CA that
//! signs the broker's certificate (for 127.0.0.1 and localhost) and a
//! client's, and a second CA with its own client, which the broker does not
//! trust.

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use std::path::{Path, PathBuf};

/// PEM files in a directory.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The CA the broker and its clients trust.
    pub ca: PathBuf,
    /// The broker's certificate and key.
    pub server_cert: PathBuf,
    /// The broker's key.
    pub server_key: PathBuf,
    /// A client certificate signed by `ca` (common name `client`: the
    /// principal `User:client`), and its key.
    pub client_cert: PathBuf,
    /// The client's key.
    pub client_key: PathBuf,
    /// Another CA, trusted by nobody here.
    pub other_ca: PathBuf,
    /// A client certificate signed by `other_ca`, and its key.
    pub other_client_cert: PathBuf,
    /// Its key.
    pub other_client_key: PathBuf,
    /// A client certificate signed by `ca` whose subject has two common
    /// names, `CN=alice, CN=admin` (a broker that took the last one would
    /// log it in as the super user), and its key.
    pub two_names_cert: PathBuf,
    /// Its key.
    pub two_names_key: PathBuf,
    /// A client certificate signed by `ca` with the common name `*`.
    pub wildcard_cert: PathBuf,
    /// Its key.
    pub wildcard_key: PathBuf,
}

struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

fn ca(name: &str) -> Ca {
    let key = KeyPair::generate().unwrap_or_else(|e| panic!("CA key: {e}"));
    let mut params =
        CertificateParams::new(Vec::<String>::new()).unwrap_or_else(|e| panic!("CA: {e}"));
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    let cert = params
        .self_signed(&key)
        .unwrap_or_else(|e| panic!("CA certificate: {e}"));
    Ca {
        pem: cert.pem(),
        issuer: Issuer::new(params, key),
    }
}

/// A certificate for `names`, signed by `ca`, whose subject's common name
/// is `common_name` (the principal a broker takes from it).
fn leaf(ca: &Ca, names: &[&str], common_name: &str) -> (String, String) {
    leaf_named(ca, names, &[common_name])
}

/// A certificate for `names`, signed by `ca`, whose subject has each of
/// `common_names` as a common name, in order. (rcgen keeps one value per
/// attribute type, so the second is written under the common name's OID,
/// 2.5.4.3, as a custom type: the DER is the same.)
fn leaf_named(ca: &Ca, names: &[&str], common_names: &[&str]) -> (String, String) {
    let key = KeyPair::generate().unwrap_or_else(|e| panic!("key: {e}"));
    let mut params =
        CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap_or_else(|e| panic!("params: {e}"));
    params.distinguished_name = rcgen::DistinguishedName::new();
    for (i, common_name) in common_names.iter().enumerate() {
        let kind = match i {
            0 => rcgen::DnType::CommonName,
            _ => rcgen::DnType::CustomDnType(vec![2, 5, 4, 3]),
        };
        params.distinguished_name.push(kind, *common_name);
    }
    assert!(common_names.len() <= 2, "one custom common name at most");
    let cert = params
        .signed_by(&key, &ca.issuer)
        .unwrap_or_else(|e| panic!("certificate: {e}"));
    (cert.pem(), key.serialize_pem())
}

fn write(dir: &Path, name: &str, pem: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, pem).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    path
}

/// Makes the certificates in `dir` (created if missing).
pub fn make_certificates(dir: &Path) -> TlsFiles {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let trusted = ca("ringlog test CA");
    let other = ca("untrusted CA");
    let (server_cert, server_key) = leaf(&trusted, &["127.0.0.1", "localhost"], "broker");
    let (client_cert, client_key) = leaf(&trusted, &["client.test"], "client");
    let (other_cert, other_key) = leaf(&other, &["intruder.test"], "intruder");
    let (two_names_cert, two_names_key) =
        leaf_named(&trusted, &["alice.test"], &["alice", "admin"]);
    let (wildcard_cert, wildcard_key) = leaf(&trusted, &["any.test"], "*");
    TlsFiles {
        ca: write(dir, "ca.pem", &trusted.pem),
        server_cert: write(dir, "broker.pem", &server_cert),
        server_key: write(dir, "broker.key", &server_key),
        client_cert: write(dir, "client.pem", &client_cert),
        client_key: write(dir, "client.key", &client_key),
        other_ca: write(dir, "other-ca.pem", &other.pem),
        other_client_cert: write(dir, "intruder.pem", &other_cert),
        other_client_key: write(dir, "intruder.key", &other_key),
        two_names_cert: write(dir, "two-names.pem", &two_names_cert),
        two_names_key: write(dir, "two-names.key", &two_names_key),
        wildcard_cert: write(dir, "wildcard.pem", &wildcard_cert),
        wildcard_key: write(dir, "wildcard.key", &wildcard_key),
    }
}

impl TlsFiles {
    /// The broker's TOML lines: TLS, and client certificates from `ca` required.
    pub fn broker_toml(&self, require_client_certificates: bool) -> String {
        let mut toml = format!(
            "tls_cert = {:?}\ntls_key = {:?}\n",
            self.server_cert.display().to_string(),
            self.server_key.display().to_string()
        );
        if require_client_certificates {
            toml.push_str(&format!(
                "tls_client_ca = {:?}\n",
                self.ca.display().to_string()
            ));
        }
        toml
    }
}
