//! SCRAM-SHA-256 (RFC 5802 with RFC 7677's hash): the password login of
//! the Handshake, for both ends. Pure computation: no I/O, the caller moves
//! the four messages.
//!
//! ```text
//! client-first   n,,n=alice,r=CNONCE
//! server-first   r=CNONCE+SNONCE,s=SALT,i=ITERATIONS
//! client-final   c=biws,r=CNONCE+SNONCE,p=PROOF
//! server-final   v=SERVER_SIGNATURE
//! ```
//!
//! The broker stores a [`Credential`] per user — salt, iteration count,
//! `StoredKey = H(HMAC(SaltedPassword, "Client Key"))` and `ServerKey =
//! HMAC(SaltedPassword, "Server Key")` — never the password, nor anything
//! that logs in by itself: a stolen `StoredKey` does not make a proof (it
//! takes the `ClientKey` it is the hash of). The client proves it knows the
//! password without sending it; the broker's final signature proves to the
//! client that it holds the credential too.
//!
//! What this implementation leaves out, and why: channel binding (`p=`;
//! TLS already authenticates the broker to a client that checks its
//! certificate), authorization ids (`a=`; a login acts as itself only) and
//! SASLprep of the password (its UTF-8 bytes are used as they are, as
//! Kafka does: a client in another language must not normalise them).
//! User names are `[A-Za-z0-9._@-]`, 1 to 64 characters ([`check_user`]),
//! so they never need the `=2C`/`=3D` escapes, which are decoded anyway.
//!
//! A login for a user that does not exist runs the same exchange against a
//! made-up credential (a salt derived from the user name and a secret of
//! the broker's, so asking twice gives the same salt) and fails at the same
//! step with the same answer as a wrong password: the exchange does not
//! tell which user names exist.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use ring::{digest, hmac, pbkdf2, rand::SecureRandom};
use std::num::NonZeroU32;

/// The mechanism's name, as the Handshake names it.
pub const MECHANISM: &str = "SCRAM-SHA-256";

/// Iterations of a new credential: RFC 7677 asks for at least 4096;
/// twice that costs a client about 4 ms per login here.
pub const ITERATIONS_DEFAULT: u32 = 8192;

/// The fewest iterations a stored credential may have (RFC 7677).
pub const ITERATIONS_MIN: u32 = 4096;

/// The most a client computes for a broker's server-first message: a
/// broker (or whoever answers in its place) cannot make a client spin.
pub const ITERATIONS_MAX: u32 = 1 << 20;

/// Bytes of a new credential's salt.
const SALT_BYTES: usize = 16;

/// Bytes of randomness in each side's nonce.
const NONCE_BYTES: usize = 24;

/// The longest user name.
pub const USER_BYTES_MAX: usize = 64;

/// Why an exchange failed. The broker answers every variant of a client's
/// mistake with one AUTHENTICATION_FAILED; the words are for logs and for
/// the client's own errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScramError {
    /// A message that is not what the step expects.
    #[error("malformed SCRAM message: {0}")]
    Malformed(&'static str),
    /// The client asked for something this implementation does not do.
    #[error("unsupported SCRAM feature: {0}")]
    Unsupported(&'static str),
    /// The proof did not verify: wrong password, or no such user.
    #[error("the user name or password is wrong")]
    WrongPassword,
    /// The broker's final signature did not verify: it does not hold this
    /// user's credential (a man in the middle, or another cluster).
    #[error("the broker's SCRAM signature is wrong: it does not know this user's credential")]
    WrongServerSignature,
    /// The broker said why it refused (its server-final `e=`).
    #[error("the broker refused the login: {0}")]
    Refused(String),
    /// A user name outside the rule.
    #[error(
        "user name {0:?} must be 1 to 64 characters of letters, digits, '.', '_', '@' and '-'"
    )]
    BadUser(String),
    /// A stored credential that does not parse.
    #[error("stored credential is not valid: {0}")]
    BadCredential(&'static str),
}

/// Checks a user name: 1 to [`USER_BYTES_MAX`] of `[A-Za-z0-9._@-]`.
pub fn check_user(user: &str) -> Result<(), ScramError> {
    let fine = !user.is_empty()
        && user.len() <= USER_BYTES_MAX
        && user
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'@' | b'-'));
    if fine {
        Ok(())
    } else {
        Err(ScramError::BadUser(user.chars().take(80).collect()))
    }
}

/// What the broker keeps for one user.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    /// The salt, random per credential.
    pub salt: Vec<u8>,
    /// PBKDF2 iterations.
    pub iterations: u32,
    /// `H(ClientKey)`.
    pub stored_key: [u8; 32],
    /// `HMAC(SaltedPassword, "Server Key")`.
    pub server_key: [u8; 32],
    /// Once this credential is in force, the user's connections that
    /// logged in with another one are closed (a password changed because
    /// it leaked). False: they keep going (a planned rotation, and brokers
    /// that read their password at start).
    pub ends_sessions: bool,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Keys stay out of logs and panics.
        f.debug_struct("Credential")
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

/// The stored form's last field for a credential that ends sessions.
const END_SESSIONS_FIELD: &str = ":end-sessions";

impl Credential {
    /// A credential for `password` with a new random salt.
    pub fn new(password: &[u8], iterations: u32) -> Credential {
        let mut salt = vec![0u8; SALT_BYTES];
        fill_random(&mut salt);
        Credential::derive(password, &salt, iterations)
    }

    /// The credential `password` gives with this salt and iteration count.
    pub fn derive(password: &[u8], salt: &[u8], iterations: u32) -> Credential {
        let salted = salted_password(password, salt, iterations);
        let client_key = hmac_sha256(&salted, b"Client Key");
        Credential {
            salt: salt.to_vec(),
            iterations,
            stored_key: sha256(&client_key),
            server_key: hmac_sha256(&salted, b"Server Key"),
            ends_sessions: false,
        }
    }

    /// This credential, closing the user's connections that logged in
    /// with another one once it is in force.
    pub fn ending_sessions(mut self) -> Credential {
        self.ends_sessions = true;
        self
    }

    /// The stored form: `SCRAM-SHA-256:ITERATIONS:SALT:STORED_KEY:SERVER_KEY`
    /// (base64 fields), and `:end-sessions` when it [ends
    /// sessions](Credential::ends_sessions).
    pub fn to_text(&self) -> String {
        format!(
            "{MECHANISM}:{}:{}:{}:{}{}",
            self.iterations,
            BASE64.encode(&self.salt),
            BASE64.encode(self.stored_key),
            BASE64.encode(self.server_key),
            if self.ends_sessions {
                END_SESSIONS_FIELD
            } else {
                ""
            }
        )
    }

    /// Parses [`Credential::to_text`]'s form.
    pub fn from_text(text: &str) -> Result<Credential, ScramError> {
        let mut fields = text.trim().split(':');
        if fields.next() != Some(MECHANISM) {
            return Err(ScramError::BadCredential("not a SCRAM-SHA-256 credential"));
        }
        let iterations: u32 = fields
            .next()
            .and_then(|i| i.parse().ok())
            .filter(|i| (ITERATIONS_MIN..=ITERATIONS_MAX).contains(i))
            .ok_or(ScramError::BadCredential("iterations out of range"))?;
        let mut next = |what| {
            fields
                .next()
                .and_then(|f| BASE64.decode(f).ok())
                .ok_or(ScramError::BadCredential(what))
        };
        let salt = next("salt")?;
        let key = |bytes: Vec<u8>, what| -> Result<[u8; 32], ScramError> {
            bytes
                .try_into()
                .map_err(|_| ScramError::BadCredential(what))
        };
        let stored_key = key(next("stored key")?, "stored key")?;
        let server_key = key(next("server key")?, "server key")?;
        let ends_sessions = match fields.next() {
            None => false,
            Some(field) if field == &END_SESSIONS_FIELD[1..] => true,
            Some(_) => return Err(ScramError::BadCredential("unknown field")),
        };
        if salt.is_empty() || fields.next().is_some() {
            return Err(ScramError::BadCredential("wrong number of fields"));
        }
        Ok(Credential {
            salt,
            iterations,
            stored_key,
            server_key,
            ends_sessions,
        })
    }
}

// ---- the client's side ----

/// A client's exchange after its first message.
#[derive(Debug)]
pub struct ClientFirst {
    nonce: String,
    bare: String,
}

/// The client's first message for `user`, and the exchange to finish.
pub fn client_first(user: &str) -> Result<(ClientFirst, Vec<u8>), ScramError> {
    check_user(user)?;
    let nonce = random_nonce();
    let bare = format!("n={},r={nonce}", escape(user));
    let message = format!("n,,{bare}").into_bytes();
    Ok((ClientFirst { nonce, bare }, message))
}

/// A client's exchange after its final message: what the broker must sign.
#[derive(Debug)]
pub struct ClientFinal {
    server_signature: [u8; 32],
}

impl ClientFirst {
    /// Answers the broker's first message with the proof for `password`.
    pub fn finish(
        self,
        password: &[u8],
        server_first: &[u8],
    ) -> Result<(ClientFinal, Vec<u8>), ScramError> {
        let text = std::str::from_utf8(server_first)
            .map_err(|_| ScramError::Malformed("server-first is not UTF-8"))?;
        if let Some(why) = text.strip_prefix("e=") {
            return Err(ScramError::Refused(why.chars().take(200).collect()));
        }
        let mut fields = text.split(',');
        let nonce = field(fields.next(), 'r')?;
        let salt = BASE64
            .decode(field(fields.next(), 's')?)
            .map_err(|_| ScramError::Malformed("salt is not base64"))?;
        let iterations: u32 = field(fields.next(), 'i')?
            .parse()
            .map_err(|_| ScramError::Malformed("iteration count is not a number"))?;
        if !nonce.starts_with(&self.nonce) || nonce.len() <= self.nonce.len() {
            return Err(ScramError::Malformed(
                "the broker's nonce does not extend the client's",
            ));
        }
        if !(ITERATIONS_MIN..=ITERATIONS_MAX).contains(&iterations) || salt.is_empty() {
            return Err(ScramError::Malformed(
                "iteration count out of range or empty salt",
            ));
        }
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{text},{without_proof}", self.bare);
        let salted = salted_password(password, &salt, iterations);
        let client_key = hmac_sha256(&salted, b"Client Key");
        let stored_key = sha256(&client_key);
        let signature = hmac_sha256(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(signature)
            .map(|(k, s)| k ^ s)
            .collect();
        let server_key = hmac_sha256(&salted, b"Server Key");
        let message = format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes();
        Ok((
            ClientFinal {
                server_signature: hmac_sha256(&server_key, auth_message.as_bytes()),
            },
            message,
        ))
    }
}

impl ClientFinal {
    /// Checks the broker's final message: it proves the broker holds the
    /// credential.
    pub fn verify(&self, server_final: &[u8]) -> Result<(), ScramError> {
        let text = std::str::from_utf8(server_final)
            .map_err(|_| ScramError::Malformed("server-final is not UTF-8"))?;
        if let Some(why) = text.strip_prefix("e=") {
            return Err(ScramError::Refused(why.chars().take(200).collect()));
        }
        let signature = BASE64
            .decode(field(text.split(',').next(), 'v')?)
            .map_err(|_| ScramError::Malformed("server signature is not base64"))?;
        if equal(&signature, &self.server_signature) {
            Ok(())
        } else {
            Err(ScramError::WrongServerSignature)
        }
    }
}

// ---- the broker's side ----

/// The broker's exchange after its first message.
#[derive(Debug)]
pub struct ServerFirst {
    user: String,
    /// The user's, or a made-up one for a user that does not exist.
    credential: Credential,
    /// False for a made-up credential: the exchange fails at the proof,
    /// after the same work as a wrong password.
    known: bool,
    gs2_header: String,
    nonce: String,
    /// The client's part of `nonce` (its first bytes).
    client_nonce_len: usize,
    auth_prefix: String,
}

/// Reads a client's first message and answers it. `lookup` finds the
/// user's credential; for an unknown user the answer is made up from
/// `secret` so that it looks like a real one ([module doc](self)), with
/// the default iteration count.
pub fn server_first(
    client_first: &[u8],
    lookup: impl FnOnce(&str) -> Option<Credential>,
    secret: &[u8],
) -> Result<(ServerFirst, Vec<u8>), ScramError> {
    server_first_among(client_first, lookup, secret, &[])
}

/// [`server_first`], with the iteration counts of the real users
/// (`iterations`, one per user): an unknown user's made-up count is one of
/// them, chosen by `secret` and the name — the same on every broker that
/// shares the secret and across restarts — so that a count that is not
/// the default does not tell a real user from a made-up one. With no
/// users, the default.
pub fn server_first_among(
    client_first: &[u8],
    lookup: impl FnOnce(&str) -> Option<Credential>,
    secret: &[u8],
    iterations: &[u32],
) -> Result<(ServerFirst, Vec<u8>), ScramError> {
    let text = std::str::from_utf8(client_first)
        .map_err(|_| ScramError::Malformed("client-first is not UTF-8"))?;
    // gs2-header: "n,," or "y,," (no channel binding, no authzid).
    let (gs2_header, bare) = match text.get(..3) {
        Some("n,,") | Some("y,,") => text.split_at(3),
        _ if text.starts_with("p=") => return Err(ScramError::Unsupported("channel binding")),
        _ if text.starts_with("n,a=") || text.starts_with("y,a=") => {
            return Err(ScramError::Unsupported("authorization identity"))
        }
        _ => return Err(ScramError::Malformed("client-first has no gs2 header")),
    };
    let mut fields = bare.split(',');
    let first = fields.next();
    if first.is_some_and(|f| f.starts_with("m=")) {
        return Err(ScramError::Unsupported("extensions"));
    }
    let user = unescape(field(first, 'n')?)?;
    let client_nonce = field(fields.next(), 'r')?;
    if client_nonce.is_empty()
        || !client_nonce
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b',')
    {
        return Err(ScramError::Malformed("client nonce"));
    }
    check_user(&user)?;
    let (credential, known) = match lookup(&user) {
        Some(credential) => (credential, true),
        None => {
            let mut keys = [0u8; 64];
            fill_random(&mut keys);
            let pick = hmac_sha256(secret, format!("iterations of {user}").as_bytes());
            let pick = u64::from_le_bytes(pick[..8].try_into().unwrap_or([0u8; 8]));
            let made_up = Credential {
                salt: hmac_sha256(secret, format!("salt of {user}").as_bytes())[..SALT_BYTES]
                    .to_vec(),
                iterations: match iterations.len() {
                    0 => ITERATIONS_DEFAULT,
                    n => iterations[(pick % n as u64) as usize],
                },
                stored_key: keys[..32].try_into().unwrap_or([0u8; 32]),
                server_key: keys[32..].try_into().unwrap_or([0u8; 32]),
                ends_sessions: false,
            };
            (made_up, false)
        }
    };
    let nonce = format!("{client_nonce}{}", random_nonce());
    let message = format!(
        "r={nonce},s={},i={}",
        BASE64.encode(&credential.salt),
        credential.iterations
    );
    let exchange = ServerFirst {
        user,
        credential,
        known,
        gs2_header: gs2_header.to_string(),
        client_nonce_len: client_nonce.len(),
        nonce,
        auth_prefix: format!("{bare},{message}"),
    };
    Ok((exchange, message.into_bytes()))
}

impl ServerFirst {
    /// The user the client says it is (not yet proven).
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The stored key of the credential the proof is checked against:
    /// which of the user's passwords a session logged in with.
    pub fn stored_key(&self) -> [u8; 32] {
        self.credential.stored_key
    }

    /// Checks the client's proof. `Ok`: the proven user name and the
    /// broker's final message.
    pub fn finish(self, client_final: &[u8]) -> Result<(String, Vec<u8>), ScramError> {
        let text = std::str::from_utf8(client_final)
            .map_err(|_| ScramError::Malformed("client-final is not UTF-8"))?;
        let (without_proof, proof) = text
            .rsplit_once(",p=")
            .ok_or(ScramError::Malformed("client-final has no proof"))?;
        let mut fields = without_proof.split(',');
        let binding = field(fields.next(), 'c')?;
        if BASE64.decode(binding).ok().as_deref() != Some(self.gs2_header.as_bytes()) {
            return Err(ScramError::Malformed(
                "channel binding does not repeat the gs2 header",
            ));
        }
        let nonce = field(fields.next(), 'r')?;
        // librdkafka before 2.6.1 (kcat on Debian 12 among its users) sends
        // its own nonce again before the broker's whole one
        // (confluentinc/librdkafka#4895). Taken in exactly that shape: the
        // broker's fresh part is there, and the proof covers the message as
        // sent. Kafka 3.8.1 took any suffix; Kafka 4 takes neither.
        let client_nonce = &self.nonce[..self.client_nonce_len];
        let repeated = nonce.strip_prefix(client_nonce) == Some(self.nonce.as_str());
        if nonce != self.nonce && !repeated {
            return Err(ScramError::Malformed("nonce differs from the exchange's"));
        }
        if fields.next().is_some() {
            return Err(ScramError::Unsupported("extensions"));
        }
        let proof = BASE64
            .decode(proof)
            .map_err(|_| ScramError::Malformed("proof is not base64"))?;
        if proof.len() != 32 {
            return Err(ScramError::WrongPassword);
        }
        // The same work for a user that does not exist as for a wrong
        // password: the answer's timing tells nothing.
        let credential = &self.credential;
        let auth_message = format!("{},{without_proof}", self.auth_prefix);
        let signature = hmac_sha256(&credential.stored_key, auth_message.as_bytes());
        let client_key: Vec<u8> = proof.iter().zip(signature).map(|(p, s)| p ^ s).collect();
        if !equal(&sha256(&client_key), &credential.stored_key) || !self.known {
            return Err(ScramError::WrongPassword);
        }
        let server_signature = hmac_sha256(&credential.server_key, auth_message.as_bytes());
        let message = format!("v={}", BASE64.encode(server_signature)).into_bytes();
        Ok((self.user, message))
    }
}

// ---- pieces ----

fn field(part: Option<&str>, name: char) -> Result<&str, ScramError> {
    let part = part.ok_or(ScramError::Malformed("a field is missing"))?;
    let mut chars = part.chars();
    if chars.next() == Some(name) && chars.next() == Some('=') {
        Ok(&part[2..])
    } else {
        Err(ScramError::Malformed("a field is not the one expected"))
    }
}

fn escape(user: &str) -> String {
    user.replace('=', "=3D").replace(',', "=2C")
}

fn unescape(user: &str) -> Result<String, ScramError> {
    let mut out = String::with_capacity(user.len());
    let mut rest = user;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        let code = rest.get(at..at + 3);
        match code {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(ScramError::Malformed("bad escape in the user name")),
        }
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

fn salted_password(password: &[u8], salt: &[u8], iterations: u32) -> [u8; 32] {
    let mut out = [0u8; 32];
    let iterations = NonZeroU32::new(iterations.max(1)).unwrap_or(NonZeroU32::MIN);
    pbkdf2::derive(
        pbkdf2::PBKDF2_HMAC_SHA256,
        iterations,
        salt,
        password,
        &mut out,
    );
    out
}

fn hmac_sha256(key: &[u8], data: &[u8]) -> [u8; 32] {
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    let mut out = [0u8; 32];
    out.copy_from_slice(hmac::sign(&key, data).as_ref());
    out
}

fn sha256(data: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest::digest(&digest::SHA256, data).as_ref());
    out
}

/// Compares in time that depends on the length only.
fn equal(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Fills `out` from the system's random source.
pub fn fill_random(out: &mut [u8]) {
    // The OS's generator does not fail on Linux once booted; should it,
    // a nonce of a clock's nanoseconds would still never repeat in one
    // process — but a salt must not be guessable, so that is no fallback:
    // it aborts the exchange instead (a zero salt is refused by clients).
    if ring::rand::SystemRandom::new().fill(out).is_err() {
        out.fill(0);
    }
}

fn random_nonce() -> String {
    let mut bytes = [0u8; NONCE_BYTES];
    fill_random(&mut bytes);
    BASE64.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client-final as librdkafka before 2.6.1 writes it: its own nonce
    /// again before the broker's, with a proof over that message.
    fn repeated_nonce_final(
        password: &[u8],
        bare: &str,
        server_first: &str,
        prefix: &str,
    ) -> Vec<u8> {
        let mut fields = server_first.split(',');
        let nonce = field(fields.next(), 'r').unwrap();
        let salt = BASE64.decode(field(fields.next(), 's').unwrap()).unwrap();
        let iterations: u32 = field(fields.next(), 'i').unwrap().parse().unwrap();
        let without_proof = format!("c=biws,r={prefix}{nonce}");
        let auth_message = format!("{bare},{server_first},{without_proof}");
        let salted = salted_password(password, &salt, iterations);
        let client_key = hmac_sha256(&salted, b"Client Key");
        let signature = hmac_sha256(&sha256(&client_key), auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(signature)
            .map(|(k, s)| k ^ s)
            .collect();
        format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes()
    }

    #[test]
    fn librdkafkas_repeated_client_nonce_is_taken_and_no_other_prefix_is() {
        let credential = Credential::new(b"pw", ITERATIONS_MIN);
        let lookup = |_: &str| Some(credential.clone());
        let cnonce = "rOprNGfwEbeRWgbNEkqO";
        let bare = format!("n=alice,r={cnonce}");
        let first = format!("n,,{bare}");
        let (server, answer) =
            server_first_among(first.as_bytes(), lookup, b"secret", &[]).unwrap();
        let answer = String::from_utf8(answer).unwrap();
        let buggy = repeated_nonce_final(b"pw", &bare, &answer, cnonce);
        assert_eq!(server.finish(&buggy).unwrap().0, "alice");
        // Any other prefix (or the wrong password) is refused.
        let (server, answer) =
            server_first_among(first.as_bytes(), lookup, b"secret", &[]).unwrap();
        let answer = String::from_utf8(answer).unwrap();
        let other = repeated_nonce_final(b"pw", &bare, &answer, "zz");
        assert!(server.finish(&other).is_err());
        let (server, answer) =
            server_first_among(first.as_bytes(), lookup, b"secret", &[]).unwrap();
        let answer = String::from_utf8(answer).unwrap();
        let wrong = repeated_nonce_final(b"nope", &bare, &answer, cnonce);
        assert!(matches!(
            server.finish(&wrong),
            Err(ScramError::WrongPassword)
        ));
    }

    fn login(
        user: &str,
        password: &[u8],
        stored: Option<Credential>,
    ) -> Result<String, ScramError> {
        let (client, first) = client_first(user)?;
        let (server, server_first) = server_first(&first, |_| stored, b"secret")?;
        let (client, last) = client.finish(password, &server_first)?;
        let (who, server_final) = server.finish(&last)?;
        client.verify(&server_final)?;
        Ok(who)
    }

    #[test]
    fn rfc_7677_test_vector_is_reproduced() {
        // RFC 7677 §3: user "user", password "pencil".
        let salt = BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let credential = Credential::derive(b"pencil", &salt, 4096);
        let client_first_bare = "n=user,r=rOprNGfwEbeRWgbNEkqO";
        let server_first =
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let without_proof = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        let auth = format!("{client_first_bare},{server_first},{without_proof}");
        let client = ClientFirst {
            nonce: "rOprNGfwEbeRWgbNEkqO".into(),
            bare: client_first_bare.into(),
        };
        let (client, last) = client.finish(b"pencil", server_first.as_bytes()).unwrap();
        assert_eq!(
            String::from_utf8(last).unwrap(),
            format!("{without_proof},p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
        );
        let signature = hmac_sha256(&credential.server_key, auth.as_bytes());
        assert_eq!(
            BASE64.encode(signature),
            "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
        client
            .verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .unwrap();
    }

    #[test]
    fn the_right_password_logs_in_and_both_sides_are_proven() {
        let stored = Credential::new(b"s3cret", ITERATIONS_MIN);
        assert_eq!(login("alice", b"s3cret", Some(stored)).unwrap(), "alice");
    }

    #[test]
    fn a_wrong_password_and_an_unknown_user_fail_alike() {
        let stored = Credential::new(b"s3cret", ITERATIONS_MIN);
        assert_eq!(
            login("alice", b"guess", Some(stored)),
            Err(ScramError::WrongPassword)
        );
        assert_eq!(
            login("mallory", b"guess", None),
            Err(ScramError::WrongPassword)
        );
        // The made-up salt is stable per name, so asking twice tells nothing.
        let salt_of = |user: &str| {
            let (_, first) = client_first(user).unwrap();
            let (_, answer) = server_first(&first, |_| None, b"secret").unwrap();
            String::from_utf8(answer)
                .unwrap()
                .split(',')
                .nth(1)
                .unwrap()
                .to_string()
        };
        assert_eq!(salt_of("mallory"), salt_of("mallory"));
        assert_ne!(salt_of("mallory"), salt_of("trudy"));
        // Made-up counts are among the real users', stable per name.
        let count_of = |user: &str, counts: &[u32]| {
            let (_, first) = client_first(user).unwrap();
            let (_, answer) = server_first_among(&first, |_| None, b"secret", counts).unwrap();
            String::from_utf8(answer)
                .unwrap()
                .split(",i=")
                .nth(1)
                .unwrap()
                .to_string()
        };
        let counts = [4096, 8192, 8192, 100_000];
        let seen: std::collections::BTreeSet<String> = (0..64)
            .map(|i| count_of(&format!("nobody{i}"), &counts))
            .collect();
        assert!(
            seen.len() >= 2
                && seen
                    .iter()
                    .all(|c| ["4096", "8192", "100000"].contains(&c.as_str())),
            "{seen:?}"
        );
        assert_eq!(count_of("nobody7", &counts), count_of("nobody7", &counts));
        assert_eq!(count_of("nobody7", &[]), ITERATIONS_DEFAULT.to_string());
    }

    #[test]
    fn a_broker_without_the_credential_is_caught_by_the_client() {
        let real = Credential::new(b"s3cret", ITERATIONS_MIN);
        let (client, first) = client_first("alice").unwrap();
        let (_, server_first) = server_first(&first, |_| Some(real), b"k").unwrap();
        let (client, _) = client.finish(b"s3cret", &server_first).unwrap();
        // An impostor's signature.
        let forged = format!("v={}", BASE64.encode([7u8; 32]));
        assert_eq!(
            client.verify(forged.as_bytes()),
            Err(ScramError::WrongServerSignature)
        );
    }

    #[test]
    fn credentials_round_trip_through_their_text_and_bad_text_is_refused() {
        let c = Credential::new(b"pw", ITERATIONS_DEFAULT);
        assert_eq!(Credential::from_text(&c.to_text()).unwrap(), c);
        assert!(!format!("{c:?}").contains(&BASE64.encode(c.stored_key)));
        let ending = c.clone().ending_sessions();
        assert!(ending.to_text().ends_with(":end-sessions"));
        assert_eq!(Credential::from_text(&ending.to_text()).unwrap(), ending);
        assert!(Credential::from_text(&format!("{}:later", c.to_text())).is_err());
        for bad in [
            "",
            "SCRAM-SHA-1:4096:AA==:AA==:AA==",
            "SCRAM-SHA-256:10:AA==:AA==:AA==",
            "SCRAM-SHA-256:4096:AA==:AA==",
            "SCRAM-SHA-256:4096:!!:AA==:AA==",
        ] {
            assert!(Credential::from_text(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn hostile_messages_are_refused_without_panicking() {
        let stored = Credential::new(b"pw", ITERATIONS_MIN);
        for first in [
            &b""[..],
            b"n,,",
            b"n,,n=",
            b"p=tls-unique,,n=a,r=x",
            b"n,a=admin,n=a,r=x",
            b"n,,m=ext,n=a,r=x",
            b"n,,n=a=zz,r=x",
            b"n,,n=bad user,r=x",
            b"n,,n=a,r=",
            b"\xff\xfe",
        ] {
            assert!(
                server_first(first, |_| Some(stored.clone()), b"k").is_err(),
                "{first:?}"
            );
        }
        let (_, first) = client_first("a").unwrap();
        let (server, _) = server_first(&first, |_| Some(stored.clone()), b"k").unwrap();
        assert!(server.finish(b"c=biws,r=wrong,p=AAAA").is_err());
        let (client, _) = client_first("a").unwrap();
        // A server nonce that does not extend the client's, and an
        // iteration count meant to make the client spin.
        assert!(client.finish(b"pw", b"r=zzz,s=AAAA,i=4096").is_err());
        let (client, first) = client_first("a").unwrap();
        let nonce = String::from_utf8(first).unwrap()[3..]
            .split(",r=")
            .nth(1)
            .unwrap()
            .to_string();
        let spin = format!("r={nonce}x,s=AAAA,i=4000000000");
        assert!(client.finish(b"pw", spin.as_bytes()).is_err());
    }

    #[test]
    fn user_names_follow_the_rule_and_escapes_decode() {
        assert!(check_user("alice@example.com").is_ok());
        assert!(check_user("").is_err());
        assert!(check_user(&"a".repeat(65)).is_err());
        assert!(check_user("a,b").is_err());
        assert_eq!(unescape("a=2Cb=3Dc").unwrap(), "a,b=c");
    }
}
