//! Mapping a TLS client certificate to a principal by rules
//! (`tls_principal_mapping_rules`), as Kafka's `ssl.principal.mapping.rules`
//! does, with subject alternative names besides: certificates from two
//! CAs with different naming habits become users of one namespace.
//!
//! ```toml
//! tls_principal_mapping_rules = [
//!   "RULE:^CN=([^,]+),OU=eng,O=example$/$1/L",        # the subject DN (RFC 2253)
//!   "SAN:DNS:^([a-z0-9-]+)\\.partners\\.example$/partner-$1/",  # a DNS name
//!   "DEFAULT",                                         # the common name
//! ]
//! ```
//!
//! The first rule that matches names the user: `RULE:` matches the whole
//! subject as RFC 2253 writes it (`CN=alice,OU=eng,O=example`, the last
//! RDN first, as Java shows it to Kafka), `SAN:DNS:`, `SAN:EMAIL:` and
//! `SAN:URI:` each of the certificate's alternative names of that kind, in
//! order; the replacement takes `$1` (`${1}` before a letter or digit), and
//! a trailing `L` or `U` lower- or upper-cases the result. `DEFAULT` is the
//! common name, as without rules (exactly one, no wildcard). A certificate
//! that no rule matches has no principal: its login is refused, naming its
//! subject. The name a rule makes must be a principal's (no spaces, `:`,
//! `*` or `?`), or the login is refused too: a rule cannot make anyone a
//! wildcard.

use super::certificate::{self, NoPrincipal, SanKind};
use regex::Regex;
use std::sync::OnceLock;

/// What a rule matches.
#[derive(Debug, Clone)]
enum Source {
    /// The common name, as without rules.
    Default,
    /// The subject DN (RFC 2253).
    Subject,
    /// Each alternative name of a kind.
    San(SanKind),
}

/// A rule: where it looks, its pattern (anchored whole), its replacement,
/// and the case of the result.
#[derive(Debug, Clone)]
struct Rule {
    source: Source,
    pattern: Option<Regex>,
    replacement: String,
    case: Option<char>,
}

/// The rules, in order.
#[derive(Debug, Clone, Default)]
pub struct MappingRules(Vec<Rule>);

/// A rule that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    /// Neither `DEFAULT`, `RULE:` nor `SAN:KIND:`.
    #[error("tls_principal_mapping_rules: {0:?} is not DEFAULT, RULE:PATTERN/REPLACEMENT/[L|U] or SAN:DNS|EMAIL|URI:PATTERN/REPLACEMENT/[L|U]")]
    Form(String),
    /// A pattern the regex engine refuses.
    #[error("tls_principal_mapping_rules: {rule:?}: {why}")]
    Pattern {
        /// The rule.
        rule: String,
        /// The engine's words.
        why: String,
    },
}

static RULES: OnceLock<MappingRules> = OnceLock::new();

/// Sets the broker's rules (once, at start).
pub fn init(rules: MappingRules) {
    let _ = RULES.set(rules);
}

/// The principal of a verified client certificate (DER), by the broker's
/// rules (none set: its common name).
pub fn principal(der: &[u8]) -> Result<String, NoPrincipal> {
    match RULES.get() {
        Some(rules) if !rules.0.is_empty() => rules.principal(der),
        _ => certificate::principal(der),
    }
}

/// Splits `PATTERN/REPLACEMENT/FLAGS` at its unescaped slashes (`\/` is a
/// slash of the pattern or replacement).
fn split_slashes(text: &str) -> Option<(String, String, String)> {
    let mut parts = vec![String::new()];
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'/') => {
                parts.last_mut()?.push('/');
                chars.next();
            }
            '/' => parts.push(String::new()),
            c => parts.last_mut()?.push(c),
        }
    }
    let [pattern, replacement, flags]: [String; 3] = parts.try_into().ok()?;
    Some((pattern, replacement, flags))
}

impl MappingRules {
    /// Parses the configuration's rules.
    pub fn parse(rules: &[String]) -> Result<MappingRules, RuleError> {
        let mut parsed = Vec::with_capacity(rules.len());
        for text in rules {
            let text = text.trim();
            let form = || RuleError::Form(text.to_string());
            if text == "DEFAULT" {
                parsed.push(Rule {
                    source: Source::Default,
                    pattern: None,
                    replacement: String::new(),
                    case: None,
                });
                continue;
            }
            let (source, rest) = if let Some(rest) = text.strip_prefix("RULE:") {
                (Source::Subject, rest)
            } else if let Some(rest) = text.strip_prefix("SAN:DNS:") {
                (Source::San(SanKind::Dns), rest)
            } else if let Some(rest) = text.strip_prefix("SAN:EMAIL:") {
                (Source::San(SanKind::Email), rest)
            } else if let Some(rest) = text.strip_prefix("SAN:URI:") {
                (Source::San(SanKind::Uri), rest)
            } else {
                return Err(form());
            };
            let (pattern, replacement, flags) = split_slashes(rest).ok_or_else(form)?;
            let case = match flags.as_str() {
                "" => None,
                "L" => Some('L'),
                "U" => Some('U'),
                _ => return Err(form()),
            };
            if pattern.is_empty() {
                return Err(form());
            }
            let pattern =
                Regex::new(&format!("^(?:{pattern})$")).map_err(|e| RuleError::Pattern {
                    rule: text.to_string(),
                    why: e.to_string(),
                })?;
            parsed.push(Rule {
                source,
                pattern: Some(pattern),
                replacement,
                case,
            });
        }
        Ok(MappingRules(parsed))
    }

    /// The principal the first matching rule makes of `der`.
    pub fn principal(&self, der: &[u8]) -> Result<String, NoPrincipal> {
        let dn = certificate::subject_dn(der).ok_or(NoPrincipal::Unreadable)?;
        let sans = certificate::subject_alt_names(der).ok_or(NoPrincipal::Unreadable)?;
        for rule in &self.0 {
            let (pattern, candidates): (&Regex, Vec<&str>) = match (&rule.source, &rule.pattern) {
                (Source::Default, _) => return certificate::principal(der),
                (Source::Subject, Some(pattern)) => (pattern, vec![dn.as_str()]),
                (Source::San(kind), Some(pattern)) => (
                    pattern,
                    sans.iter()
                        .filter(|(k, _)| k == kind)
                        .map(|(_, name)| name.as_str())
                        .collect(),
                ),
                (_, None) => continue,
            };
            for candidate in candidates {
                let Some(captures) = pattern.captures(candidate) else {
                    continue;
                };
                let mut name = String::new();
                captures.expand(&rule.replacement, &mut name);
                let name = match rule.case {
                    Some('L') => name.to_lowercase(),
                    Some('U') => name.to_uppercase(),
                    _ => name,
                };
                return named(name);
            }
        }
        Err(NoPrincipal::NoRuleMatched(dn.chars().take(256).collect()))
    }
}

/// `User:NAME` for the name a rule made, if it can be a principal.
fn named(name: String) -> Result<String, NoPrincipal> {
    if name.is_empty() || name.contains(['*', '?']) {
        return Err(NoPrincipal::BadName(name));
    }
    let principal = format!("User:{name}");
    protocol::acl::check_principal(&principal).map_err(|_| NoPrincipal::BadName(name))?;
    Ok(principal)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn certificate(subject: &[(rcgen::DnType, &str)], sans: &[rcgen::SanType]) -> Vec<u8> {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        let mut dn = rcgen::DistinguishedName::new();
        for (kind, value) in subject {
            dn.push(kind.clone(), *value);
        }
        params.distinguished_name = dn;
        params.subject_alt_names = sans.to_vec();
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    fn rules(text: &[&str]) -> MappingRules {
        MappingRules::parse(&text.iter().map(ToString::to_string).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn rules_map_the_subject_and_alternative_names_first_match_wins() {
        use rcgen::DnType::{CommonName, OrganizationName, OrganizationalUnitName};
        let eng = certificate(
            &[
                (OrganizationName, "example"),
                (OrganizationalUnitName, "eng"),
                (CommonName, "Alice"),
            ],
            &[],
        );
        assert_eq!(
            certificate::subject_dn(&eng).unwrap(),
            "CN=Alice,OU=eng,O=example"
        );
        let partner = certificate(
            &[(CommonName, "host-17")],
            &[rcgen::SanType::DnsName(
                "bob.partners.example".try_into().unwrap(),
            )],
        );
        let set = rules(&[
            r"RULE:^CN=([^,]+),OU=eng,O=example$/$1/L",
            r"SAN:DNS:^([a-z]+)\.partners\.example$/partner-$1/",
            "DEFAULT",
        ]);
        assert_eq!(set.principal(&eng).unwrap(), "User:alice");
        assert_eq!(set.principal(&partner).unwrap(), "User:partner-bob");
        // Without DEFAULT, a certificate no rule matches has no principal.
        let strict = rules(&[r"RULE:^CN=([^,]+),OU=eng,O=example$/$1/"]);
        let refused = strict.principal(&partner).unwrap_err();
        assert_eq!(refused, NoPrincipal::NoRuleMatched("CN=host-17".into()));
        assert!(refused.to_string().contains("CN=host-17"), "{refused}");
        // A rule cannot make a wildcard or a name with a space.
        let wild = rules(&[r"RULE:^CN=(.*)$/*$1/"]);
        assert!(matches!(
            wild.principal(&partner),
            Err(NoPrincipal::BadName(_))
        ));
        let upper = rules(&[r"RULE:^CN=([^,]+).*$/$1/U"]);
        assert_eq!(upper.principal(&eng).unwrap(), "User:ALICE");
    }

    #[test]
    fn bad_rules_are_refused_with_their_text() {
        for bad in ["RULE:x", "RULE:a/b/Q", "SAN:IP:^a$/b/", "CN", "RULE:/b/"] {
            let error = MappingRules::parse(&[bad.to_string()]).unwrap_err();
            assert_eq!(error, RuleError::Form(bad.to_string()), "{bad}");
        }
        let error = MappingRules::parse(&["RULE:(/b/".to_string()]).unwrap_err();
        assert!(matches!(error, RuleError::Pattern { .. }), "{error}");
        assert_eq!(
            split_slashes(r"a\/b/c/L"),
            Some(("a/b".into(), "c".into(), "L".into()))
        );
    }
}
