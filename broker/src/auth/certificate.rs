//! The principal of a TLS client certificate: `User:` and its subject's
//! common name (CN), the user's name in the certificate. rustls has
//! verified the certificate against `tls_client_ca` before this reads it;
//! the reading is still defensive — bounded DER, no panics.
//!
//! Why the common name and not the whole distinguished name: access rules
//! name users, and a CA that issues client certificates already gives each
//! user its own CN; `User:CN=alice,OU=eng,O=example` in every rule would
//! only repeat what the CA decided.

/// The principal of a certificate (DER), or why it has none.
///
/// Exactly one common name: a subject with several (`CN=alice, CN=admin`)
/// names no one user — taking the first or the last lets whoever can get
/// a certificate with a second CN pick the principal it acts as (issue 48:
/// the last one won, and `CN=alice, CN=admin` logged in as the super
/// user). A name that looks like a wildcard (`*`, `?`) is refused too: in
/// a rule `User:*` means everyone, and no certificate may name everyone.
pub fn principal(der: &[u8]) -> Result<String, NoPrincipal> {
    let names = common_names(der).ok_or(NoPrincipal::Unreadable)?;
    let name = match names.as_slice() {
        [] => return Err(NoPrincipal::NoCommonName),
        [one] => one,
        many => {
            return Err(NoPrincipal::SeveralCommonNames(
                many.iter()
                    .map(|n| n.chars().take(64).collect::<String>())
                    .collect(),
            ))
        }
    };
    if name.contains(['*', '?']) {
        return Err(NoPrincipal::Wildcard(name.clone()));
    }
    let principal = format!("User:{name}");
    protocol::acl::check_principal(&principal).map_err(|_| NoPrincipal::BadName(name.clone()))?;
    Ok(principal)
}

/// Why a verified client certificate names no principal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoPrincipal {
    /// Its subject is not DER this reader understands.
    #[error("the client certificate's subject cannot be read")]
    Unreadable,
    /// Its subject has no CN.
    #[error("the client certificate's subject has no common name (CN)")]
    NoCommonName,
    /// Its subject has several CNs (each cut to 64 characters).
    #[error("the client certificate's subject has {} common names ({}): a principal needs exactly one", .0.len(), .0.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", "))]
    SeveralCommonNames(Vec<String>),
    /// Its CN looks like a wildcard.
    #[error("the client certificate's common name {0:?} looks like a wildcard: it cannot be a principal")]
    Wildcard(String),
    /// No `tls_principal_mapping_rules` rule matches its subject (as RFC
    /// 2253 writes it, cut to 256 characters) or alternative names.
    #[error("no tls_principal_mapping_rules rule matches the client certificate (subject {0:?}, or its alternative names)")]
    NoRuleMatched(String),
    /// Its CN breaks the principal rule.
    #[error("the name {0:?} from the client certificate cannot be a principal (no spaces, ':', '*' or '?', at most 256 bytes)")]
    BadName(String),
}

/// One DER element: its tag, and its contents.
fn element(bytes: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = bytes.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let count = (first & 0x7f) as usize;
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let len = rest[..count]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | *b as usize);
        (len, &rest[count..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
const COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];

/// One attribute of a subject: its type's OID and its value as text.
type Attribute = (Vec<u8>, String);

/// The subject's attributes (type OID, value as text), in DER order
/// (RDN by RDN), and the TBSCertificate's fields after the subject; `None`
/// when the certificate cannot be read that far.
fn subject(der: &[u8]) -> Option<(Vec<Attribute>, &[u8])> {
    let (tag, certificate, _) = element(der)?;
    if tag != SEQUENCE {
        return None;
    }
    let (tag, tbs, _) = element(certificate)?;
    if tag != SEQUENCE {
        return None;
    }
    let mut fields = tbs;
    let (tag, _, rest) = element(fields)?;
    if tag == 0xa0 {
        // [0] version; the serial number follows.
        fields = rest;
    }
    // serialNumber, signature, issuer, validity, then the subject.
    for _ in 0..4 {
        fields = element(fields)?.2;
    }
    let (tag, mut names, after) = element(fields)?;
    if tag != SEQUENCE {
        return None;
    }
    let mut found = Vec::new();
    while !names.is_empty() {
        let (tag, mut set, rest) = element(names)?;
        names = rest;
        if tag != SET {
            return None;
        }
        while !set.is_empty() {
            let (tag, pair, rest) = element(set)?;
            set = rest;
            if tag != SEQUENCE {
                return None;
            }
            let (tag, oid, value) = element(pair)?;
            if tag != OID {
                return None;
            }
            let (tag, text, _) = element(value)?;
            // UTF8String, PrintableString, IA5String, T61String; any
            // other string type still counts (never skipped: a second
            // name must not hide behind an odd encoding).
            let text = if matches!(tag, 0x0c | 0x13 | 0x16 | 0x14) {
                std::str::from_utf8(text).ok()?.to_string()
            } else {
                String::from_utf8_lossy(text).into_owned()
            };
            found.push((oid.to_vec(), text));
        }
    }
    Some((found, after))
}

/// The subject as RFC 2253 writes it (`CN=alice,OU=eng,O=example`: the
/// last RDN first, as Java's `X500Principal.getName()` and so Kafka's
/// `ssl.principal.mapping.rules` see it); `None` when unreadable.
pub fn subject_dn(der: &[u8]) -> Option<String> {
    let (attributes, _) = subject(der)?;
    let parts: Vec<String> = attributes
        .iter()
        .rev()
        .map(|(oid, value)| format!("{}={}", attribute_name(oid), escape_dn(value)))
        .collect();
    Some(parts.join(","))
}

/// An attribute type's short name, or its dotted OID.
fn attribute_name(oid: &[u8]) -> String {
    match oid {
        [0x55, 0x04, 0x03] => "CN".into(),
        [0x55, 0x04, 0x06] => "C".into(),
        [0x55, 0x04, 0x07] => "L".into(),
        [0x55, 0x04, 0x08] => "ST".into(),
        [0x55, 0x04, 0x0a] => "O".into(),
        [0x55, 0x04, 0x0b] => "OU".into(),
        [0x55, 0x04, 0x09] => "STREET".into(),
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19] => "DC".into(),
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x01] => "UID".into(),
        other => dotted(other),
    }
}

/// An OID's dotted form (`2.5.4.5`).
fn dotted(oid: &[u8]) -> String {
    let Some((&first, rest)) = oid.split_first() else {
        return String::new();
    };
    let mut parts = vec![
        (first / 40).min(2).to_string(),
        (first - 40 * (first / 40).min(2)).to_string(),
    ];
    let mut value: u64 = 0;
    for byte in rest {
        value = (value << 7) | u64::from(byte & 0x7f);
        if byte & 0x80 == 0 {
            parts.push(value.to_string());
            value = 0;
        }
    }
    parts.join(".")
}

/// A value with RFC 2253's special characters escaped.
fn escape_dn(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for (i, c) in value.chars().enumerate() {
        let edge =
            (i == 0 && (c == ' ' || c == '#')) || (i + 1 == value.chars().count() && c == ' ');
        if edge || matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A subject alternative name's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SanKind {
    /// `rfc822Name`.
    Email,
    /// `dNSName`.
    Dns,
    /// `uniformResourceIdentifier`.
    Uri,
}

const SUBJECT_ALT_NAME: &[u8] = &[0x55, 0x1d, 0x11];

/// The certificate's subject alternative names of the kinds above, in
/// order (none when it has no such extension); `None` when unreadable.
pub fn subject_alt_names(der: &[u8]) -> Option<Vec<(SanKind, String)>> {
    let (_, mut fields) = subject(der)?;
    // subjectPublicKeyInfo, then [1] and [2] unique ids, [3] extensions.
    fields = element(fields)?.2;
    let mut found = Vec::new();
    while !fields.is_empty() {
        let (tag, contents, rest) = element(fields)?;
        fields = rest;
        if tag != 0xa3 {
            continue;
        }
        let (tag, mut extensions, _) = element(contents)?;
        if tag != SEQUENCE {
            return None;
        }
        while !extensions.is_empty() {
            let (tag, extension, rest) = element(extensions)?;
            extensions = rest;
            if tag != SEQUENCE {
                return None;
            }
            let (tag, oid, mut value) = element(extension)?;
            if tag != OID || oid != SUBJECT_ALT_NAME {
                continue;
            }
            let (mut tag, mut octets, after) = element(value)?;
            if tag == 0x01 {
                // critical BOOLEAN
                value = after;
                (tag, octets, _) = element(value)?;
            }
            if tag != 0x04 {
                return None;
            }
            let (tag, mut names, _) = element(octets)?;
            if tag != SEQUENCE {
                return None;
            }
            while !names.is_empty() {
                let (tag, name, rest) = element(names)?;
                names = rest;
                let kind = match tag {
                    0x81 => SanKind::Email,
                    0x82 => SanKind::Dns,
                    0x86 => SanKind::Uri,
                    _ => continue,
                };
                found.push((kind, String::from_utf8_lossy(name).into_owned()));
            }
        }
    }
    Some(found)
}

/// Every common name of the subject, as text, in order; `None` when the
/// certificate cannot be read that far.
fn common_names(der: &[u8]) -> Option<Vec<String>> {
    let (attributes, _) = subject(der)?;
    Some(
        attributes
            .into_iter()
            .filter(|(oid, _)| oid == COMMON_NAME)
            .map(|(_, text)| text)
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn certificate(cn: Option<&str>) -> Vec<u8> {
        let mut params = rcgen::CertificateParams::new(vec!["client.test".to_string()]).unwrap();
        let mut subject = rcgen::DistinguishedName::new();
        subject.push(rcgen::DnType::OrganizationName, "ringlog tests");
        if let Some(cn) = cn {
            subject.push(rcgen::DnType::CommonName, cn);
        }
        params.distinguished_name = subject;
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    /// A certificate whose subject has two CNs. rcgen keeps one value per
    /// attribute type, so a `CN=admin` set is spliced into the DER after
    /// the subject's last one, and the lengths of the subject, the
    /// tbsCertificate and the certificate grow by as much (the signature
    /// no longer matches; nothing here checks it).
    fn two_common_names() -> Vec<u8> {
        let der = certificate(Some("alice"));
        let offset = |inner: &[u8]| inner.as_ptr() as usize - der.as_ptr() as usize;
        let (_, certificate, _) = element(&der).unwrap();
        let tbs_at = offset(certificate);
        let (_, tbs, _) = element(certificate).unwrap();
        let mut fields = tbs;
        if fields[0] == 0xa0 {
            fields = element(fields).unwrap().2;
        }
        for _ in 0..4 {
            fields = element(fields).unwrap().2;
        }
        let subject_at = offset(fields);
        let (_, names, _) = element(fields).unwrap();
        let at = offset(names) + names.len();
        let name = b"admin";
        let mut extra = vec![
            0x31, 0x0e, 0x30, 0x0c, 0x06, 0x03, 0x55, 0x04, 0x03, 0x0c, 0x05,
        ];
        extra.extend_from_slice(name);
        let mut out = der[..at].to_vec();
        out.extend_from_slice(&extra);
        out.extend_from_slice(&der[at..]);
        for header in [0, tbs_at, subject_at] {
            let first = out[header + 1];
            if first < 0x80 {
                out[header + 1] = first + extra.len() as u8;
            } else {
                let count = (first & 0x7f) as usize;
                let bytes = &mut out[header + 2..header + 2 + count];
                let mut len = bytes.iter().fold(0usize, |acc, b| (acc << 8) | *b as usize);
                len += extra.len();
                for b in bytes.iter_mut().rev() {
                    *b = (len & 0xff) as u8;
                    len >>= 8;
                }
            }
        }
        out
    }

    #[test]
    fn a_subject_with_two_common_names_or_a_wildcard_names_no_principal() {
        let two = two_common_names();
        assert_eq!(
            common_names(&two).unwrap(),
            vec!["alice".to_string(), "admin".to_string()]
        );
        let refused = principal(&two).unwrap_err();
        assert_eq!(
            refused,
            NoPrincipal::SeveralCommonNames(vec!["alice".into(), "admin".into()])
        );
        assert!(refused.to_string().contains("2 common names"), "{refused}");
        for wildcard in ["*", "adm*", "a?ice"] {
            let refused = principal(&certificate(Some(wildcard))).unwrap_err();
            assert_eq!(refused, NoPrincipal::Wildcard(wildcard.to_string()));
        }
    }

    #[test]
    fn the_common_name_is_the_principal() {
        assert_eq!(
            principal(&certificate(Some("alice"))).unwrap(),
            "User:alice"
        );
        let none = principal(&certificate(None)).unwrap_err();
        assert_eq!(none, NoPrincipal::NoCommonName);
        let spaced = principal(&certificate(Some("Alice Smith"))).unwrap_err();
        assert_eq!(spaced, NoPrincipal::BadName("Alice Smith".into()));
    }

    #[test]
    fn bytes_that_are_no_certificate_have_no_principal_and_never_panic() {
        let good = certificate(Some("alice"));
        for cut in 0..good.len() {
            let _ = principal(&good[..cut]);
        }
        for bad in [
            &b""[..],
            &[0x30, 0x84, 0xff, 0xff, 0xff, 0xff],
            &[0x30, 0x80],
        ] {
            assert!(principal(bad).is_err());
        }
    }
}
