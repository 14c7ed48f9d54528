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
pub fn principal(der: &[u8]) -> Result<String, String> {
    let name =
        common_name(der).ok_or("the client certificate's subject has no common name (CN)")?;
    let principal = format!("User:{name}");
    protocol::acl::check_principal(&principal).map_err(|_| {
        format!("the client certificate's common name {name:?} cannot be a principal (no spaces or ':', at most 256 bytes)")
    })?;
    Ok(principal)
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

/// The subject's last common name, as text.
fn common_name(der: &[u8]) -> Option<String> {
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
    let (tag, mut names, _) = element(fields)?;
    if tag != SEQUENCE {
        return None;
    }
    let mut found = None;
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
            if tag != OID || oid != COMMON_NAME {
                continue;
            }
            let (tag, text, _) = element(value)?;
            // UTF8String, PrintableString, IA5String, T61String.
            if matches!(tag, 0x0c | 0x13 | 0x16 | 0x14) {
                found = std::str::from_utf8(text).ok().map(str::to_string);
            }
        }
    }
    found
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

    #[test]
    fn the_common_name_is_the_principal() {
        assert_eq!(
            principal(&certificate(Some("alice"))).unwrap(),
            "User:alice"
        );
        let none = principal(&certificate(None)).unwrap_err();
        assert!(none.contains("no common name"), "{none}");
        let spaced = principal(&certificate(Some("Alice Smith"))).unwrap_err();
        assert!(spaced.contains("cannot be a principal"), "{spaced}");
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
