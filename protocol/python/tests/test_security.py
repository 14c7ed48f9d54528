"""Logins, TLS and access control from the Python client (issue 22, item
5), against the broker the Rust test (tests/it/python.rs) starts with TLS,
``authentication = "scram_or_tls"`` and ``authorization = true``: users
``admin`` (a super user) and ``alice`` (read on ``py-`` topics), and the
TLS client certificate ``client`` (read on them too)."""

import base64
import os
import uuid

import pytest

import ringlog
from ringlog import BrokerError, ConnectionFailed, ErrorCode
from ringlog.scram import ClientExchange
from test_client import read_partition

SECURE = os.environ.get("RINGLOG_SECURE_BROKERS", "")
CA = os.environ.get("RINGLOG_SECURE_CA", "")
CERT = os.environ.get("RINGLOG_SECURE_CERT", "")
KEY = os.environ.get("RINGLOG_SECURE_KEY", "")


def tls():
    assert SECURE and CA, "RINGLOG_SECURE_BROKERS and RINGLOG_SECURE_CA name the secured broker"
    return ringlog.tls_context(CA)


def test_the_scram_exchange_reproduces_rfc_7677():
    exchange = ClientExchange("user", b"pencil")
    exchange.nonce = "rOprNGfwEbeRWgbNEkqO"
    exchange.bare = "n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = exchange.final(
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    assert final == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    exchange.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    with pytest.raises(ringlog.LoginFailed, match="signature is wrong"):
        exchange.verify(b"v=" + base64.b64encode(bytes(32)))


def test_strangers_are_refused_with_what_failed():
    with pytest.raises(BrokerError) as refused:
        ringlog.Client(SECURE, tls=tls())
    assert refused.value.code == ErrorCode.AUTHENTICATION_REQUIRED, refused.value
    with pytest.raises(BrokerError) as wrong:
        ringlog.Client(SECURE, tls=tls(), user="alice", password="guess")
    assert wrong.value.code == ErrorCode.AUTHENTICATION_FAILED
    assert "wrong user name or password" in wrong.value.message
    # Plain TCP to a TLS-only broker says what is missing.
    with pytest.raises(ConnectionFailed, match="does it require TLS"):
        ringlog.Client(SECURE, user="alice", password="alice-secret")


def test_alice_reads_what_her_rule_allows_and_nothing_more():
    admin = ringlog.Client(SECURE, tls=tls(), user="admin", password="admin-secret")
    assert admin.conn.principal == "User:admin"
    topic = "py-" + uuid.uuid4().hex[:12]
    admin.create_topic(topic, partitions=1)
    producer = ringlog.Producer(admin, topic, acks="flushed")
    for i in range(20):
        producer.send(f"secret-{i}".encode())
    assert producer.flush() == 20
    alice = ringlog.Client(SECURE, tls=tls(), user="alice", password="alice-secret")
    assert alice.conn.principal == "User:alice"
    assert [m.value for m in read_partition(alice, topic, 0)][:2] == [b"secret-0", b"secret-1"]
    refused = ringlog.Producer(alice, topic, acks="flushed")
    refused.send(b"not allowed")
    with pytest.raises(BrokerError) as denied:
        refused.flush()
    assert denied.value.code == ErrorCode.AUTHORIZATION_FAILED
    assert "may not write topic" in denied.value.message
    with pytest.raises(BrokerError) as denied:
        alice.delete_topic(topic)
    assert denied.value.code == ErrorCode.AUTHORIZATION_FAILED
    # Metadata lists only what she may describe.
    assert all(name.startswith("py-") for name in alice.metadata().topics)
    # A TLS client certificate's common name is a principal too.
    certified = ringlog.Client(SECURE, tls=ringlog.tls_context(CA, CERT, KEY))
    assert certified.conn.principal == "User:client"
    assert len(read_partition(certified, topic, 0)) == 20
