"""Logins, TLS and access control from the Python client (issue 22, item
5), against the broker the Rust test (tests/it/python.rs) starts with TLS,
``authentication = "scram_or_tls"`` and ``authorization = true``: users
``admin`` (a super user) and ``alice`` (read on ``py-`` topics), and the
TLS client certificate ``client`` (read on them too)."""

import base64
import os
import time
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


def test_admin_requests_users_rules_quotas_and_topic_settings():
    """Issue 46, item 8: the admin requests the Rust client has."""
    admin = ringlog.Client(SECURE, tls=tls(), user="admin", password="admin-secret")
    name = "carol" + uuid.uuid4().hex[:6]
    assert admin.alter_users({name: b"carol-secret"}) == (1, 0)
    assert name in admin.list_users()
    carol = ringlog.Client(SECURE, tls=tls(), user=name, password="carol-secret")
    assert carol.conn.principal == f"User:{name}"
    # Rules, in their text form, as `ringlog acl` prints them.
    topic = "py-" + uuid.uuid4().hex[:12]
    admin.create_topic(topic, partitions=1)
    rule = f"allow User:{name} read topic:{topic}"
    assert admin.create_acls([rule]) == 1
    assert admin.create_acls([rule]) == 0
    assert admin.describe_acls(principal=f"User:{name}") == [rule]
    assert admin.describe_acls(resource_type="topic", resource_name=topic) == [rule]
    with pytest.raises(ValueError, match="neither allow nor deny"):
        admin.create_acls([f"permit User:{name} read topic:{topic}"])
    with pytest.raises(BrokerError) as denied:
        carol.create_acls([f"allow User:{name} all cluster:cluster"])
    assert denied.value.code == ErrorCode.AUTHORIZATION_FAILED
    assert admin.delete_acls([rule]) == 1
    assert admin.describe_acls(principal=f"User:{name}") == []
    # Quotas at run time.
    quota = ringlog.Quota(f"User:{name}", produce_bytes_per_second=1_000_000, connections=4)
    assert admin.alter_quotas(set=[quota]) == (1, 0)
    set_now, _configured = admin.describe_quotas()
    assert quota in set_now
    with pytest.raises(BrokerError) as bad:
        admin.alter_quotas(set=[ringlog.Quota(name, requests_per_second=1)])
    assert bad.value.code == ErrorCode.INVALID_REQUEST
    assert "User:NAME" in bad.value.message
    assert admin.alter_quotas(delete=[f"User:{name}"]) == (0, 1)
    assert quota not in admin.describe_quotas()[0]
    # Topic settings at run time, by Kafka's names.
    changed = admin.alter_topic_config(topic, {"retention.ms": "3600000", "retention.bytes": "-1"})
    assert changed.settings["retention_ms"] == 3_600_000
    assert changed.overrides == {"retention.ms": 3_600_000, "retention.bytes": (1 << 63) - 1}
    with pytest.raises(BrokerError) as refused:
        admin.alter_topic_config(topic, {"retention.mss": "1"})
    assert refused.value.code == ErrorCode.INVALID_CONFIG
    assert 'unknown topic setting "retention.mss"' in refused.value.message
    back = admin.alter_topic_config(topic, delete=["retention.ms", "retention.bytes"])
    assert back.overrides == {}
    # The user goes, and cannot log in again.
    assert admin.alter_users(deletions=[name]) == (0, 1)
    with pytest.raises(BrokerError) as gone:
        ringlog.Client(SECURE, tls=tls(), user=name, password="carol-secret")
    assert gone.value.code == ErrorCode.AUTHENTICATION_FAILED


def test_every_answer_says_how_long_the_principal_is_over_its_quota_and_the_client_waits():
    """Issue 46, item 3: throttled frames — answers and refusals alike carry
    the principal's throttle time; the client waits it out before its next
    request and adds it up."""
    admin = ringlog.Client(SECURE, tls=tls(), user="admin", password="admin-secret")
    name = "erin" + uuid.uuid4().hex[:6]
    admin.alter_users({name: b"erin-secret"})
    admin.alter_quotas(set=[ringlog.Quota(f"User:{name}", requests_per_second=20)])
    try:
        erin = ringlog.Client(SECURE, tls=tls(), user=name, password="erin-secret")
        assert erin.conn.throttled_frames
        started = time.monotonic()
        for _ in range(30):
            erin.metadata()
        took = time.monotonic() - started
        waited = erin.throttled_ms
        print(f"30 Metadata requests at a 20/s quota took {took:.2f} s; the client waited {waited} ms")
        assert waited > 1000, waited
        # A refusal says it too.
        before = erin.throttled_ms
        for _ in range(5):
            with pytest.raises(BrokerError) as refused:
                erin.create_topic("py-" + uuid.uuid4().hex[:12], partitions=1)
            assert refused.value.code == ErrorCode.AUTHORIZATION_FAILED
        assert erin.throttled_ms > before
        # No quota, no wait.
        for _ in range(30):
            admin.metadata()
        assert admin.throttled_ms == 0
    finally:
        admin.alter_quotas(delete=[f"User:{name}"])
        admin.alter_users(deletions=[name])
