"""SCRAM-SHA-256 (RFC 5802 with RFC 7677's hash): the client's side of a
login, as PROTOCOL.md section 2 describes it. The password never leaves
the client; the broker's final signature proves it holds the user's
credential."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from .errors import LoginFailed

MECHANISM = "SCRAM-SHA-256"
ITERATIONS_MIN = 4096
ITERATIONS_MAX = 1 << 20
ITERATIONS_DEFAULT = 8192
SALT_BYTES = 16


def _hmac(key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hashlib.sha256).digest()


def credential(password: bytes, iterations: int = ITERATIONS_DEFAULT) -> str:
    """A user's stored credential for ``password`` with a fresh salt, in
    the form AlterUsers takes: ``SCRAM-SHA-256:ITERATIONS:SALT:STORED_KEY:
    SERVER_KEY`` (base64 fields). The broker keeps this, never the
    password."""
    if isinstance(password, str):
        password = password.encode()
    if not ITERATIONS_MIN <= iterations <= ITERATIONS_MAX:
        raise ValueError(f"iterations must be {ITERATIONS_MIN}..={ITERATIONS_MAX}, got {iterations}")
    salt = secrets.token_bytes(SALT_BYTES)
    salted = hashlib.pbkdf2_hmac("sha256", password, salt, iterations)
    stored_key = hashlib.sha256(_hmac(salted, b"Client Key")).digest()
    server_key = _hmac(salted, b"Server Key")
    fields = [base64.b64encode(x).decode() for x in (salt, stored_key, server_key)]
    return f"{MECHANISM}:{iterations}:{':'.join(fields)}"


class ClientExchange:
    """One login of ``user`` with ``password`` (bytes: UTF-8 as typed, not
    normalised)."""

    def __init__(self, user: str, password: bytes) -> None:
        if not user or len(user) > 64 or not all(c.isascii() and (c.isalnum() or c in "._@-") for c in user):
            raise LoginFailed(f"user name {user!r} must be 1 to 64 of letters, digits, '.', '_', '@' and '-'")
        self.user = user
        self.password = password
        self.nonce = base64.b64encode(secrets.token_bytes(24)).decode()
        self.bare = f"n={user},r={self.nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        """The client-first message, for the Handshake."""
        return f"n,,{self.bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        """The client-final message (the proof), for Authenticate."""
        try:
            text = server_first.decode()
            if text.startswith("e="):
                raise LoginFailed(f"the broker refused the login: {text[2:200]}")
            fields = dict(part.split("=", 1) for part in text.split(",")[:3])
            nonce, salt, iterations = fields["r"], base64.b64decode(fields["s"]), int(fields["i"])
        except LoginFailed:
            raise
        except (ValueError, KeyError, UnicodeDecodeError) as e:
            raise LoginFailed(f"malformed SCRAM server-first message: {e}") from e
        if not nonce.startswith(self.nonce) or len(nonce) <= len(self.nonce):
            raise LoginFailed("the broker's nonce does not extend the client's")
        if not ITERATIONS_MIN <= iterations <= ITERATIONS_MAX or not salt:
            raise LoginFailed("iteration count out of range or empty salt")
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self.bare},{text},{without_proof}".encode()
        salted = hashlib.pbkdf2_hmac("sha256", self.password, salt, iterations)
        client_key = _hmac(salted, b"Client Key")
        stored_key = hashlib.sha256(client_key).digest()
        signature = _hmac(stored_key, auth_message)
        proof = bytes(k ^ s for k, s in zip(client_key, signature))
        self._server_signature = _hmac(_hmac(salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        """Checks the broker's signature; raises LoginFailed if it is wrong."""
        text = server_final.decode(errors="replace")
        if text.startswith("e="):
            raise LoginFailed(f"the broker refused the login: {text[2:200]}")
        try:
            signature = base64.b64decode(text.split(",")[0].removeprefix("v="), validate=True)
        except ValueError as e:
            raise LoginFailed(f"malformed SCRAM server-final message: {e}") from e
        if not hmac.compare_digest(signature, self._server_signature):
            raise LoginFailed("the broker's SCRAM signature is wrong: it does not know this user's credential")


def credential(password: bytes, iterations: int = 8192) -> str:
    """The stored form of a new credential for ``password`` (a random
    salt), as AlterUsers takes it."""
    salt = secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha256", password, salt, iterations)
    stored = hashlib.sha256(_hmac(salted, b"Client Key")).digest()
    server = _hmac(salted, b"Server Key")
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    return f"{MECHANISM}:{iterations}:{b64(salt)}:{b64(stored)}:{b64(server)}"
