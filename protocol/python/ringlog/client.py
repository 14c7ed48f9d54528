"""Connections, metadata, admin, the producer and the consumer."""

from __future__ import annotations

import random
import struct
import socket
import ssl
import time
from collections import deque
from typing import Deque, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

import flatbuffers

from . import batch, codec, scram
from .admin import AdminRequests
from .codec import Api, Message
from .errors import (
    BrokerError,
    ConnectionFailed,
    ErrorCode,
    LoginFailed,
    PartitionUnavailable,
    ProtocolError,
    RinglogError,
)
from .wire import AuthenticateRequest, AuthenticateResponse
from .wire import AckMode as _AckMode
from .wire import CreatePartitionsRequest, CreatePartitionsResponse
from .wire import CreateTopicRequest, DeleteTopicRequest, ErrorResponse, FetchRequest
from .wire import InitProducerIdRequest, InitProducerIdResponse
from .wire import FetchResponse, HandshakeRequest, HandshakeResponse, ListOffsetsRequest
from .wire import ListOffsetsResponse, MetadataRequest, MetadataResponse, OffsetSpec
from .wire import ProduceRequest, ProduceResponse, TopicConfig

CLIENT_NAME = "ringlog-python/0.1.0"

_ACKS = {
    "none": _AckMode.AckMode.None_,
    "written": _AckMode.AckMode.Written,
    "flushed": _AckMode.AckMode.Flushed,
    # Every in-sync replica has flushed it (as "flushed" on one copy).
    "all": _AckMode.AckMode.All,
}


class Partition(NamedTuple):
    """Where one partition lives."""

    partition: int
    broker_id: int
    shard_id: int


class TopicMetadata(NamedTuple):
    """A topic: its partitions and effective settings."""

    name: str
    partitions: List[Partition]
    settings: Dict[str, int]
    #: Unique per creation: a topic deleted and created again has another
    #: (empty from brokers older than topic ids).
    id: str = ""
    #: What the topic sets itself, by Kafka's names (``retention.ms``):
    #: the settings not listed take the broker's default.
    overrides: Dict[str, int] = {}


class Metadata(NamedTuple):
    """Live brokers (their shard addresses) and topics."""

    brokers: Dict[int, Dict[int, str]]
    topics: Dict[str, TopicMetadata]

    def owner_address(self, topic: str, partition: int) -> Optional[str]:
        """The ``host:port`` of the shard that owns the partition."""
        info = self.topics.get(topic)
        if info is None or partition >= len(info.partitions):
            return None
        p = info.partitions[partition]
        return self.brokers.get(p.broker_id, {}).get(p.shard_id)


class Offsets(NamedTuple):
    """ListOffsets' answer: the offset asked for and the partition's range."""

    offset: int
    start_offset: int
    flushed_offset: int
    end_offset: int


def _metadata_request(topics: Sequence[str]) -> bytes:
    b = flatbuffers.Builder(256)
    names = [b.CreateString(t) for t in topics]
    MetadataRequest.StartTopicsVector(b, len(names))
    for n in reversed(names):
        b.PrependUOffsetTRelative(n)
    vector = b.EndVector()
    MetadataRequest.Start(b)
    MetadataRequest.AddTopics(b, vector)
    return _finish(b, MetadataRequest.End(b))


def _finish(builder: flatbuffers.Builder, root: int) -> bytes:
    builder.Finish(root)
    return bytes(builder.Output())


class Throttled:
    """The throttle times brokers reported to a client's connections, added up."""

    def __init__(self) -> None:
        #: Milliseconds the brokers asked this client to wait (and it did).
        self.ms = 0


class Connection:
    """One TCP connection to one broker shard, after the Handshake.

    Requests may be pipelined with :meth:`send`; responses arrive in request
    order and are read with :meth:`recv`. Every read and write has the
    connection's ``timeout`` (seconds).
    """

    def __init__(
        self,
        address: str,
        timeout: float = 10.0,
        *,
        login: Optional[Tuple[str, Union[str, bytes]]] = None,
        tls: Optional[ssl.SSLContext] = None,
        throttled: Optional[Throttled] = None,
    ) -> None:
        host, _, port = address.rpartition(":")
        try:
            sock = socket.create_connection((host, int(port)), timeout=timeout)
        except (OSError, ValueError) as e:
            raise ConnectionFailed(f"connecting to {address}: {e}") from e
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(timeout)
        if tls is not None:
            try:
                sock = tls.wrap_socket(sock, server_hostname=host)
            except (OSError, ssl.SSLError) as e:
                sock.close()
                raise ConnectionFailed(f"TLS with {address}: {e}") from e
        self.sock = sock
        self.address = address
        self.next_id = 1
        # Set once a read or write failed: the connection is out of step.
        self.broken = False
        # PROTOCOL.md §1, throttled frames: granted in the Handshake, every
        # later answer says how long the principal is over a quota, and the
        # next request waits that long (the broker would hold it anyway).
        self.throttled_frames = False
        self.quiet_until = 0.0
        #: Throttle times reported on this connection, in milliseconds.
        self.throttled_ms = 0
        self._throttled = throttled
        exchange = None
        if login is not None:
            user, password = login
            exchange = scram.ClientExchange(user, password.encode() if isinstance(password, str) else password)
        b = flatbuffers.Builder(256)
        name = b.CreateString(CLIENT_NAME)
        if exchange is not None:
            mechanism = b.CreateString(scram.MECHANISM)
            first = b.CreateByteVector(exchange.first())
        HandshakeRequest.Start(b)
        HandshakeRequest.AddProtocolVersion(b, codec.PROTOCOL_VERSION)
        HandshakeRequest.AddClientName(b, name)
        HandshakeRequest.AddThrottleInFrames(b, True)
        if exchange is not None:
            HandshakeRequest.AddSaslMechanism(b, mechanism)
            HandshakeRequest.AddSaslBytes(b, first)
        try:
            header, _ = self.call(Api.HANDSHAKE, _finish(b, HandshakeRequest.End(b)))
        except ConnectionFailed as e:
            if tls is None and "closed the connection" in str(e):
                raise ConnectionFailed(
                    f"{address} closed the connection without answering the handshake "
                    "(does it require TLS? pass tls=ringlog.tls_context(ca))"
                ) from e
            raise
        hello = HandshakeResponse.HandshakeResponse.GetRootAs(header, 0)
        self.broker_id = hello.BrokerId()
        self.shard_id = hello.ShardId()
        self.broker_version = (hello.BrokerVersion() or b"").decode()
        #: Who this connection acts as ("User:alice", "User:ANONYMOUS").
        self.principal = (hello.Principal() or b"").decode()
        self.throttled_frames = bool(hello.ThrottleInFrames())
        if exchange is not None:
            self.principal = self._authenticate(exchange, _bytes_of(hello))

    def _authenticate(self, exchange: "scram.ClientExchange", server_first: bytes) -> str:
        """The rest of a SCRAM login: the proof, then the broker's signature."""
        b = flatbuffers.Builder(256)
        proof = b.CreateByteVector(exchange.final(server_first))
        AuthenticateRequest.Start(b)
        AuthenticateRequest.AddSaslBytes(b, proof)
        header, _ = self.call(Api.AUTHENTICATE, _finish(b, AuthenticateRequest.End(b)))
        answer = AuthenticateResponse.AuthenticateResponse.GetRootAs(header, 0)
        exchange.verify(bytes(answer.SaslBytes(i) for i in range(answer.SaslBytesLength())))
        # Who the broker is comes only after the proof (an older broker
        # said it in the Handshake and leaves these out).
        version = answer.BrokerVersion()
        if version:
            self.broker_id = answer.BrokerId()
            self.shard_id = answer.ShardId()
            self.broker_version = version.decode()
        return (answer.Principal() or b"").decode()

    def send(self, api: int, header: bytes, payload: bytes = b"") -> int:
        """Sends one request; returns its request id."""
        wait = self.quiet_until - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        request_id = self.next_id
        self.next_id = (self.next_id + 1) & 0xFFFFFFFF
        try:
            self.sock.sendall(codec.frame(api, request_id, header, payload))
        except OSError as e:
            self.broken = True
            raise ConnectionFailed(f"sending to {self.address}: {e}") from e
        return request_id

    def _read_exact(self, n: int) -> bytes:
        chunks = []
        while n > 0:
            try:
                chunk = self.sock.recv(min(n, 1 << 20))
            except socket.timeout as e:
                self.broken = True
                raise ConnectionFailed(f"{self.address} did not answer in time") from e
            except OSError as e:
                self.broken = True
                raise ConnectionFailed(f"reading from {self.address}: {e}") from e
            if not chunk:
                self.broken = True
                raise ConnectionFailed(f"{self.address} closed the connection")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def recv(self) -> Tuple[int, int, bytes, bytes]:
        """Reads one response: (request id, error code, header, payload)."""
        try:
            rest, _api, error, request_id, header_len = codec.parse_prefix(
                self._read_exact(codec.PREFIX_BYTES)
            )
        except ValueError as e:
            raise ProtocolError(f"from {self.address}: {e}") from e
        if self.throttled_frames:
            if rest < codec.THROTTLE_BYTES + header_len:
                self.broken = True
                raise ProtocolError(f"from {self.address}: a throttled answer too short for its throttle time")
            (throttle_ms,) = codec.THROTTLE.unpack(self._read_exact(codec.THROTTLE_BYTES))
            rest -= codec.THROTTLE_BYTES
            if throttle_ms:
                self.quiet_until = time.monotonic() + throttle_ms / 1000
                self.throttled_ms += throttle_ms
                if self._throttled is not None:
                    self._throttled.ms += throttle_ms
        body = self._read_exact(rest)
        return request_id, error, body[:header_len], body[header_len:]

    def call(self, api: int, header: bytes, payload: bytes = b"") -> Tuple[bytes, bytes]:
        """Sends one request and reads its response; raises BrokerError."""
        request_id = self.send(api, header, payload)
        got, error, header, payload = self.recv()
        if got != request_id:
            raise ProtocolError(f"{self.address} answered request {got}, expected {request_id}")
        if error:
            raise broker_error(error, header)
        return header, payload

    def close(self) -> None:
        """Closes the socket."""
        self.sock.close()


def _bytes_of(hello: "HandshakeResponse.HandshakeResponse") -> bytes:
    """A Handshake answer's ``sasl_bytes``."""
    return bytes(hello.SaslBytes(i) for i in range(hello.SaslBytesLength()))


def tls_context(ca: str, cert: Optional[str] = None, key: Optional[str] = None) -> ssl.SSLContext:
    """A TLS context that trusts the CA certificates in ``ca`` (PEM) and,
    with ``cert`` and ``key``, presents that client certificate (a broker
    with ``tls_client_ca`` asks for one; with ``authentication = "tls"``
    its common name is the principal)."""
    context = ssl.create_default_context(cafile=ca)
    if cert is not None or key is not None:
        if cert is None or key is None:
            raise ValueError("cert and key go together")
        context.load_cert_chain(cert, key)
    return context


def broker_error(code: int, header: bytes) -> BrokerError:
    """The exception for an error frame's code and ErrorResponse header."""
    try:
        e = ErrorResponse.ErrorResponse.GetRootAs(header, 0)
        message = (e.Message() or b"").decode(errors="replace")
        start, end = e.StartOffset(), e.EndOffset()
        owner = e.OwnerBrokerId()
    except Exception:  # a header that is not an ErrorResponse
        return BrokerError(code, "(no readable message)")
    valid = (start, end) if code == 11 else None
    return BrokerError(code, message, valid, owner if code == 18 else None)


class Client(AdminRequests):
    """Bootstrap connection, metadata and admin requests (users, rules,
    quotas and topic settings: ``admin.py``).

    ``brokers`` is one ``host:port`` or several (a list, or comma-separated);
    the first that answers is used. Not thread-safe: give each thread its own.

    >>> client = Client("127.0.0.1:9092")            # doctest: +SKIP
    >>> client.create_topic("clicks", partitions=4)  # doctest: +SKIP
    """

    def __init__(
        self,
        brokers: Union[str, Sequence[str]],
        timeout: float = 10.0,
        *,
        user: Optional[str] = None,
        password: Optional[Union[str, bytes]] = None,
        tls: Optional[ssl.SSLContext] = None,
    ) -> None:
        addresses = brokers.split(",") if isinstance(brokers, str) else list(brokers)
        self.timeout = timeout
        if (user is None) != (password is None):
            raise ValueError("user and password go together")
        #: The login every connection of this client makes (SCRAM-SHA-256).
        self.login = None if user is None else (user, password)
        #: The TLS context every connection of this client uses.
        self.tls = tls
        self.bootstrap = [a.strip() for a in addresses if a.strip()]
        # Shard 0 of every broker the last Metadata listed: where to go on
        # when the bootstrap broker dies.
        self.known: List[str] = []
        self._shards: Dict[str, Connection] = {}
        self._throttled = Throttled()
        self.conn = self._connect_any()

    @property
    def throttled_ms(self) -> int:
        """How long the brokers asked this client's connections to wait over a
        quota, added up (each waited its turn before its next request)."""
        return self._throttled.ms

    def open(self, address: str) -> Connection:
        """A new connection to ``address`` with this client's login and TLS."""
        return Connection(address, self.timeout, login=self.login, tls=self.tls, throttled=self._throttled)

    def _connect_any(self) -> "Connection":
        failures = []
        for address in self.bootstrap + [a for a in self.known if a not in self.bootstrap]:
            try:
                return self.open(address)
            except BrokerError as e:
                # A login refused by one broker is refused by every one.
                if e.code in (ErrorCode.AUTHENTICATION_FAILED, ErrorCode.AUTHENTICATION_REQUIRED):
                    raise
                failures.append(str(e))
            except LoginFailed:
                raise
            except RinglogError as e:
                failures.append(str(e))
        raise ConnectionFailed("no broker answered: " + "; ".join(failures or ["no address given"]))

    def reconnect(self) -> None:
        """Replaces the bootstrap connection (after it broke) with one to
        the first broker that answers: the bootstrap addresses, then the
        brokers the last Metadata listed."""
        try:
            self.conn.close()
        except OSError:
            pass
        self.conn = self._connect_any()

    def call(self, api: int, header: bytes, repeatable: bool = False) -> Tuple[bytes, bytes]:
        """A request on the bootstrap connection; one that is safe to repeat
        is sent again once on a new connection if the first one broke."""
        try:
            return self.conn.call(api, header)
        except ConnectionFailed:
            self.reconnect()
            if not repeatable:
                raise
            return self.conn.call(api, header)

    def connection(self, address: str) -> Connection:
        """A connection to a shard, opened once and reused (and opened again
        after it broke)."""
        if address == self.conn.address and not self.conn.broken:
            return self.conn
        conn = self._shards.get(address)
        if conn is None or conn.broken:
            conn = self.open(address)
            self._shards[address] = conn
        return conn

    def metadata(self, topics: Sequence[str] = ()) -> Metadata:
        """Brokers and the named topics (every topic when none is named)."""
        header, _ = self.call(Api.METADATA, _metadata_request(topics), repeatable=True)
        metadata = _decode_metadata(header)
        known = [shards[min(shards)] for _, shards in sorted(metadata.brokers.items()) if shards]
        if known:
            self.known = known
        return metadata

    def describe_topic(self, name: str) -> TopicMetadata:
        """One topic's partitions and settings (UNKNOWN_TOPIC if none)."""
        return self.metadata([name]).topics[name]

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        *,
        retention_ms: int = 0,
        retention_bytes: int = 0,
        segment_bytes: int = 0,
        flush_messages: int = 0,
        flush_interval_ms: int = 0,
        replication_factor: int = 0,
        min_insync_replicas: int = 0,
        write_caching: bool = False,
        message_format: int = 0,
        timestamp_type: str = "",
    ) -> TopicMetadata:
        """Creates a topic; 0 for a setting means the broker's default.
        With ``write_caching``, a replicated topic's acks=all is answered
        (and consumers see messages) once every in-sync replica has written
        them, without their flushes. ``message_format=2`` stores Kafka's
        record batches (times, headers, compression), with
        ``timestamp_type`` ``"CreateTime"`` (the producer's, the default) or
        ``"LogAppendTime"`` (the broker's)."""
        types = {"": 0, "CreateTime": 1, "LogAppendTime": 2}
        if timestamp_type not in types:
            raise ValueError(f"timestamp_type must be CreateTime or LogAppendTime, got {timestamp_type!r}")
        b = flatbuffers.Builder(128)
        n = b.CreateString(name)
        TopicConfig.Start(b)
        TopicConfig.AddRetentionMs(b, retention_ms)
        TopicConfig.AddRetentionBytes(b, retention_bytes)
        TopicConfig.AddSegmentBytes(b, segment_bytes)
        TopicConfig.AddFlushMessages(b, flush_messages)
        TopicConfig.AddFlushIntervalMs(b, flush_interval_ms)
        TopicConfig.AddReplicationFactor(b, replication_factor)
        TopicConfig.AddMinInsyncReplicas(b, min_insync_replicas)
        TopicConfig.AddWriteCaching(b, write_caching)
        TopicConfig.AddMessageFormat(b, message_format)
        TopicConfig.AddTimestampType(b, types[timestamp_type])
        config = TopicConfig.End(b)
        CreateTopicRequest.Start(b)
        CreateTopicRequest.AddName(b, n)
        CreateTopicRequest.AddPartitions(b, partitions)
        CreateTopicRequest.AddConfig(b, config)
        self.call(Api.CREATE_TOPIC, _finish(b, CreateTopicRequest.End(b)))
        created = self.describe_topic(name)
        self._wait_until_served(created)
        return created

    def _wait_until_served(self, created: TopicMetadata) -> None:
        """Waits, up to the client's timeout, until the broker of every
        partition serves the topic with all its partitions (new, or more):
        the others learn them from etcd's watch a moment after the broker
        that made them answered, and a produce or fetch sent there in
        between would be refused (UNKNOWN_TOPIC, UNKNOWN_PARTITION). A
        broker that does not answer is not waited for."""
        metadata = self.metadata([created.name])
        addresses = {metadata.owner_address(created.name, p.partition) for p in created.partitions}
        deadline = time.monotonic() + self.timeout
        for address in sorted(a for a in addresses if a is not None):
            try:
                conn = self.connection(address)
            except RinglogError:
                continue
            while time.monotonic() < deadline:
                try:
                    header, _ = conn.call(Api.METADATA, _metadata_request([created.name]))
                    topic = _decode_metadata(header).topics.get(created.name)
                    if topic is not None and len(topic.partitions) >= len(created.partitions):
                        break
                except BrokerError as e:
                    if e.code != ErrorCode.UNKNOWN_TOPIC:
                        break
                except RinglogError:
                    break
                time.sleep(0.02)

    def delete_topic(self, name: str) -> None:
        """Deletes a topic and its data."""
        b = flatbuffers.Builder(64)
        n = b.CreateString(name)
        DeleteTopicRequest.Start(b)
        DeleteTopicRequest.AddName(b, n)
        self.call(Api.DELETE_TOPIC, _finish(b, DeleteTopicRequest.End(b)))

    def init_producer_id(self, topic: str) -> Tuple[int, int]:
        """A new idempotent producer's ``(id, epoch)`` (InitProducerId),
        for a producer writing ``topic`` (it needs write on it)."""
        b = flatbuffers.Builder(64)
        t = b.CreateString(topic)
        InitProducerIdRequest.Start(b)
        InitProducerIdRequest.AddTopic(b, t)
        header, _ = self.call(Api.INIT_PRODUCER_ID, _finish(b, InitProducerIdRequest.End(b)), repeatable=True)
        answer = InitProducerIdResponse.InitProducerIdResponse.GetRootAs(header, 0)
        pid, epoch = answer.ProducerId(), answer.ProducerEpoch()
        if pid < 0 or epoch < 0:
            raise ProtocolError(f"producer id {pid} with epoch {epoch}: both must be 0 or above")
        return pid, epoch

    def create_partitions(self, name: str, partitions: int) -> List[int]:
        """Raises a topic's partition count to ``partitions`` (never lowers
        it: INVALID_CONFIG); returns the broker of each new partition. A
        producer made before sees the new partitions once made again."""
        b = flatbuffers.Builder(64)
        n = b.CreateString(name)
        CreatePartitionsRequest.Start(b)
        CreatePartitionsRequest.AddTopic(b, n)
        CreatePartitionsRequest.AddPartitions(b, partitions)
        header, _ = self.call(Api.CREATE_PARTITIONS, _finish(b, CreatePartitionsRequest.End(b)))
        answer = CreatePartitionsResponse.CreatePartitionsResponse.GetRootAs(header, 0)
        self._wait_until_served(self.describe_topic(name))
        return [answer.Brokers(i) for i in range(answer.BrokersLength())]

    def list_offsets(self, topic: str, partition: int, spec: Union[str, int] = "latest") -> Offsets:
        """``"earliest"``, ``"latest"`` (the flushed end), or a Unix time in
        milliseconds (the first offset of the earliest segment appended to
        since then: segment granularity)."""
        address = self.partition_address(self.metadata([topic]), topic, partition)
        b = flatbuffers.Builder(64)
        t = b.CreateString(topic)
        ListOffsetsRequest.Start(b)
        ListOffsetsRequest.AddTopic(b, t)
        ListOffsetsRequest.AddPartition(b, partition)
        if spec == "earliest":
            ListOffsetsRequest.AddSpec(b, OffsetSpec.OffsetSpec.Earliest)
        elif spec == "latest":
            ListOffsetsRequest.AddSpec(b, OffsetSpec.OffsetSpec.Latest)
        elif isinstance(spec, int):
            ListOffsetsRequest.AddSpec(b, OffsetSpec.OffsetSpec.BeforeTime)
            ListOffsetsRequest.AddTimestampMs(b, spec)
        else:
            raise ValueError(f"spec must be 'earliest', 'latest' or a time in ms, got {spec!r}")
        header, _ = self.connection(address).call(Api.LIST_OFFSETS, _finish(b, ListOffsetsRequest.End(b)))
        r = ListOffsetsResponse.ListOffsetsResponse.GetRootAs(header, 0)
        return Offsets(r.Offset(), r.StartOffset(), r.FlushedOffset(), r.EndOffset())

    def partition_address(self, metadata: "Metadata", topic: str, partition: int) -> str:
        """The shard that owns a partition; :class:`PartitionUnavailable`
        when Metadata does not list its broker (it is down)."""
        address = metadata.owner_address(topic, partition)
        if address is not None:
            return address
        info = metadata.topics.get(topic)
        if info is not None and partition < len(info.partitions):
            raise PartitionUnavailable(topic, partition, info.partitions[partition].broker_id)
        return self.conn.address

    def close(self) -> None:
        """Closes every connection."""
        for conn in self._shards.values():
            conn.close()
        self._shards.clear()
        self.conn.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _decode_metadata(header: bytes) -> Metadata:
    try:
        r = MetadataResponse.MetadataResponse.GetRootAs(header, 0)
        brokers: Dict[int, Dict[int, str]] = {}
        for i in range(r.BrokersLength()):
            broker = r.Brokers(i)
            shards = {}
            for j in range(broker.ShardsLength()):
                s = broker.Shards(j)
                shards[s.ShardId()] = f"{(s.Host() or b'').decode()}:{s.Port()}"
            brokers[broker.BrokerId()] = shards
        topics: Dict[str, TopicMetadata] = {}
        for i in range(r.TopicsLength()):
            t = r.Topics(i)
            parts = [
                Partition(p.Partition(), p.BrokerId(), p.ShardId())
                for p in (t.Partitions(j) for j in range(t.PartitionsLength()))
            ]
            c = t.Config()
            settings = {}
            if c is not None:
                settings = {
                    "retention_ms": c.RetentionMs(),
                    "retention_bytes": c.RetentionBytes(),
                    "segment_bytes": c.SegmentBytes(),
                    "flush_messages": c.FlushMessages(),
                    "flush_interval_ms": c.FlushIntervalMs(),
                    "message_format": c.MessageFormat() or 1,
                    "timestamp_type": c.TimestampType() or 1,
                }
            o = t.Overrides()
            overrides = {}
            if o is not None:
                overrides = {
                    name: value
                    for name, value in (
                        ("retention.ms", o.RetentionMs()),
                        ("retention.bytes", o.RetentionBytes()),
                        ("segment.bytes", o.SegmentBytes()),
                        ("flush.messages", o.FlushMessages()),
                        ("flush.ms", o.FlushIntervalMs()),
                        ("min.insync.replicas", o.MinInsyncReplicas()),
                    )
                    if value
                }
            name = (t.Name() or b"").decode()
            topics[name] = TopicMetadata(name, parts, settings, (t.Id() or b"").decode(), overrides)
        return Metadata(brokers, topics)
    except Exception as e:  # the Python runtime has no verifier
        raise ProtocolError(f"unreadable Metadata response: {e}") from e


#: A produce on the wire: request id, messages, partition, bytes, sends,
#: place in the order the batches were made.
_InFlight = Tuple[int, int, int, bytes, int, int]


class Producer:
    """Sends messages to one topic, batched per partition and pipelined.

    - ``acks``: ``"none"`` (no answer on success, the paper's mode),
      ``"written"`` (default: in the broker's page cache), ``"flushed"``
      (fsynced by the leader; on a replicated topic consumers see it only
      once every in-sync replica has it too) or ``"all"`` (a replicated
      topic: every in-sync replica has it, so a read right after sees it;
      on one copy, ``"flushed"``).
    - A batch is sent when it holds ``batch_messages`` messages or
      ``batch_bytes`` bytes, or when ``linger`` seconds passed since its
      first message (checked on each :meth:`send`), and always by
      :meth:`flush`.
    - Partition: the one given; else ``fnv1a(key) % partitions`` for a keyed
      message; else one chosen at random per batch.
    - Requests go straight to the shard that owns the partition (from
      Metadata), up to ``max_in_flight`` unanswered per connection.

    :meth:`flush` sends what is buffered, waits for every answer and raises
    the first failure as :class:`BrokerError` (``failed`` counts them all);
    for ``acks="none"`` it ends with a Metadata round trip per connection,
    since a failed fire-and-forget produce is answered with an error in its
    place.

    A batch refused with a code that passes (``NOT_LEADER``,
    ``FENCED_LEADER_EPOCH``, ``UNKNOWN_LEADER_EPOCH``, ``NOT_OWNER``,
    ``NOT_ENOUGH_REPLICAS``, ``NOT_ENOUGH_REPLICAS_AFTER_APPEND``,
    ``OVERLOADED``, ``SHUTTING_DOWN``,
    ``STORAGE_UNAVAILABLE``: a leader moved or a broker is busy) is sent
    again, after a back-off and fresh Metadata, to the partition's leader
    now, up to ``retries`` times. Other failures, and ``acks="none"``
    (whose batches are not kept), are not resent.

    **Idempotence** (``idempotence=True``, the default, on a format-2
    topic with acks other than ``"none"``): the producer takes an id from
    the broker (InitProducerId) and numbers each partition's batches, at
    most 5 of them unanswered per partition, so a resent batch the broker
    stored already (an ``acks="all"`` batch answered
    ``NOT_ENOUGH_REPLICAS_AFTER_APPEND``, say) is answered with its offsets
    instead of being stored twice, and a partition's batches are stored in
    the order sent (a batch after a refused one is refused
    ``OUT_OF_ORDER_SEQUENCE`` and resent after it). Otherwise delivery is
    **at least once**: such a batch may be stored twice, and a resent batch
    may land after a later one.

    **A broken connection** leaves its unanswered batches' outcome unknown.
    Numbered batches are sent again, in order, on a new connection (to the
    partition's leader now): the broker answers one it stored already with
    its offsets, so each ends **stored** (``acked``) or **failed**
    (``failed``), never twice. Batches that are not numbered are not sent
    again (they might be stored twice): they are counted in ``unknown``,
    and :meth:`flush` raises :class:`ConnectionFailed` saying how many —
    the Rust client's Stored, Failed and Unknown outcomes.
    """

    def __init__(
        self,
        client: Client,
        topic: str,
        *,
        acks: str = "written",
        batch_messages: int = 500,
        batch_bytes: int = 1 << 20,
        linger: float = 0.005,
        max_in_flight: int = 64,
        retries: int = 16,
        compression: str = "none",
        idempotence: bool = True,
    ) -> None:
        if acks not in _ACKS:
            raise ValueError(f"acks must be one of {sorted(_ACKS)}, got {acks!r}")
        self.client = client
        self.topic = topic
        self.acks = acks
        self.batch_messages = batch_messages
        self.batch_bytes = batch_bytes
        self.linger = linger
        self.max_in_flight = max_in_flight
        self.retries = retries
        metadata = client.metadata([topic])
        if topic not in metadata.topics:
            raise BrokerError(7, f"no topic {topic!r}")
        #: 2: the topic stores Kafka's record batches (times, headers,
        #: compression); 1: the paper's messages.
        self.message_format = metadata.topics[topic].settings.get("message_format", 1)
        if compression not in batch.CODECS:
            raise ValueError(f"compression must be one of {sorted(batch.CODECS)}, got {compression!r}")
        if compression != "none" and self.message_format != 2:
            raise RinglogError(
                f"topic {topic!r} stores the paper's messages (format 1), which are not "
                f"compressed: {compression} needs a topic created with message format 2"
            )
        self.compression = compression
        self.partitions = len(metadata.topics[topic].partitions)
        #: The idempotent producer's ``(id, epoch)``; ``None`` when its
        #: batches are not numbered.
        self.producer_id: Optional[Tuple[int, int]] = None
        if idempotence and self.message_format == 2 and acks != "none":
            self.producer_id = client.init_producer_id(topic)
        epoch = self.producer_id[1] if self.producer_id else -1
        self._epoch = [epoch] * self.partitions
        self._sequence = [0] * self.partitions
        self._order = 0
        self._owner: List[str] = []
        self._conns: Dict[str, Connection] = {}
        self._route(metadata)
        self._headers = []
        for p in range(self.partitions):
            b = flatbuffers.Builder(64)
            t = b.CreateString(topic)
            ProduceRequest.Start(b)
            ProduceRequest.AddTopic(b, t)
            ProduceRequest.AddPartition(b, p)
            ProduceRequest.AddAcks(b, _ACKS[acks])
            self._headers.append(_finish(b, ProduceRequest.End(b)))
        self._batches: Dict[int, List[bytes]] = {}
        self._batch_bytes: Dict[int, int] = {}
        self._batch_started: Dict[int, float] = {}
        self._sticky: Optional[int] = None
        # Per connection: (request id, messages, partition, the batch's
        # bytes (kept for a resend; empty with acks="none"), sends so far,
        # the batch's place in the order it was made).
        self._in_flight: Dict[str, Deque[_InFlight]] = {}
        self.acked = 0
        self.failed = 0
        #: Messages whose batch was on a connection that broke before its
        #: answer, and was not sent again (not numbered): stored or not.
        self.unknown = 0
        self.resent = 0
        self._first_error: Optional[RinglogError] = None

    def _connection(self, address: str) -> Connection:
        # The producer's own: a Metadata request on the client's bootstrap
        # connection (a resend's) must not read a produce answer meant for
        # this producer, nor this producer read its answer.
        conn = self._conns.get(address)
        if conn is None or conn.broken:
            conn = self.client.open(address)
            self._conns[address] = conn
        return conn

    def _route(self, metadata: Metadata) -> None:
        self._owner = [
            metadata.owner_address(self.topic, p) or self.client.conn.address for p in range(self.partitions)
        ]

    def partition_for(self, key: Optional[bytes]) -> int:
        """The partition a message without an explicit one goes to."""
        if key is not None:
            return codec.partition_for_key(key, self.partitions)
        if self._sticky is None:
            self._sticky = random.randrange(self.partitions)
        return self._sticky

    def send(
        self,
        value: bytes,
        key: Optional[bytes] = None,
        partition: Optional[int] = None,
        *,
        headers: Sequence[Tuple[str, Optional[bytes]]] = (),
        timestamp_ms: Optional[int] = None,
    ) -> None:
        """Buffers one message (sending batches that are due). ``headers``
        and ``timestamp_ms`` (default: now) need a topic of message
        format 2."""
        p = self.partition_for(key) if partition is None else partition
        if not 0 <= p < self.partitions:
            raise ValueError(f"partition {p} of a topic with {self.partitions}")
        if self.message_format == 2:
            when = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
            message = (key, bytes(value), tuple(headers), when)
            size = len(value) + (len(key) if key else 0) + 16
        else:
            if headers or timestamp_ms is not None:
                raise RinglogError(
                    f"topic {self.topic!r} stores the paper's messages (format 1), "
                    "which carry no time or headers"
                )
            message = codec.encode_message(value, key)
            size = len(message)
        pending = self._batches.setdefault(p, [])
        if not pending:
            self._batch_started[p] = time.monotonic()
            self._batch_bytes[p] = 0
        pending.append(message)
        self._batch_bytes[p] += size
        if len(pending) >= self.batch_messages or self._batch_bytes[p] >= self.batch_bytes:
            self._send_batch(p)
        elif self.linger >= 0:
            now = time.monotonic()
            for q in [q for q, t in self._batch_started.items() if self._batches.get(q) and now - t >= self.linger]:
                self._send_batch(q)

    def _send_batch(self, p: int) -> None:
        pending = self._batches.pop(p, [])
        self._batch_started.pop(p, None)
        if not pending:
            return
        if p == self._sticky:
            self._sticky = None
        if self.message_format == 2:
            payload = batch.encode_batch(pending, self.compression, self._number(p, len(pending)))
        else:
            payload = b"".join(pending)
        self._order += 1
        self._write(p, payload, len(pending), 0, self._order)

    def _number(self, p: int, count: int) -> Tuple[int, int, int]:
        """The numbers of partition ``p``'s next batch of ``count``."""
        if self.producer_id is None:
            return batch.NOT_NUMBERED
        sequence = self._sequence[p]
        self._sequence[p] = batch.advance(sequence, count)
        return self.producer_id[0], self._epoch[p], sequence

    def _on_wire(self, p: int) -> List[_InFlight]:
        return [entry for queue in self._in_flight.values() for entry in queue if entry[2] == p]

    def _write(self, p: int, payload: bytes, count: int, sends: int, order: int) -> None:
        if self.producer_id is not None:
            # At most 5 of a partition's batches unanswered: the batches a
            # broker keeps per producer, so a resent one is always known.
            while len(self._on_wire(p)) >= 5:
                address = next(a for a, q in self._in_flight.items() if any(e[2] == p for e in q))
                self._read_one(self._connection(address), self._in_flight[address])
        address = self._owner[p]
        queue = self._in_flight.setdefault(address, deque())
        while self.acks != "none" and len(queue) >= self.max_in_flight:
            # Opened again if a read found it broken (its batches resent).
            self._read_one(self._connection(address), queue)
        conn = self._connection(address)
        kept = payload if self.acks != "none" else b""
        try:
            request_id = conn.send(Api.PRODUCE, self._headers[p], payload)
        except ConnectionFailed as broke:
            queue.append((-1, count, p, kept, sends + 1, order))
            self._connection_broke(conn, queue, broke)
            return
        queue.append((request_id, count, p, kept, sends + 1, order))

    def _connection_broke(self, conn: Connection, queue: Deque[_InFlight], broke: ConnectionFailed) -> None:
        """``conn`` broke with ``queue`` unanswered: numbered batches are
        sent again in the order they were made, on a new connection to the
        partition's leader now; the others' outcome is unknown."""
        in_doubt = sorted(queue, key=lambda entry: entry[5])
        queue.clear()
        self._conns.pop(conn.address, None)
        try:
            self._route(self.client.metadata([self.topic]))
        except RinglogError:
            pass  # the old route; the resend's answer says what next
        for _, count, p, payload, sends, order in in_doubt:
            if self.producer_id is not None and payload and sends <= self.retries:
                time.sleep(min(0.05 * 2 ** (sends - 1), 1.0))
                self.resent += 1
                self._write(p, payload, count, sends, order)
                continue
            self.unknown += max(count, 1)
            if self._first_error is None:
                self._first_error = ConnectionFailed(
                    f"{broke}: messages sent on it before its answers were not sent again "
                    "(not numbered: they might be stored twice), and may or may not be stored"
                )

    def _read_one(self, conn: Connection, queue: Deque[_InFlight]) -> None:
        try:
            request_id, error, header, _ = conn.recv()
        except ConnectionFailed as broke:
            self._connection_broke(conn, queue, broke)
            return
        while queue and queue[0][0] != request_id:
            # An earlier acks=none request's error, or one answered already.
            queue.popleft()
        if not queue:
            count, p, payload, sends, order = 0, 0, b"", 0, 0
        else:
            _, count, p, payload, sends, order = queue.popleft()
        if not error:
            ProduceResponse.ProduceResponse.GetRootAs(header, 0)
            self.acked += count
            return
        failure = broker_error(error, header)
        numbered = self.producer_id is not None and payload
        if numbered and error in (ErrorCode.OUT_OF_ORDER_SEQUENCE, ErrorCode.INVALID_PRODUCER_EPOCH):
            payload = self._renumbered(p, payload, count, order, error)
            if payload is not None and sends <= self.retries:
                self.resent += 1
                self._write(p, payload, count, sends, order)
                return
        elif payload and failure.retriable and sends <= self.retries:
            # The leader moved or the broker is busy: look again, then send
            # the batch where the partition is now.
            time.sleep(min(0.05 * 2 ** (sends - 1), 1.0))
            try:
                self._route(self.client.metadata([self.topic]))
            except RinglogError:
                pass  # the old route; the resend's answer says what next
            self.resent += 1
            self._write(p, payload, count, sends, order)
            return
        self.failed += max(count, 1)
        if self._first_error is None:
            self._first_error = failure

    def _renumbered(self, p: int, payload: bytes, count: int, order: int, error: int) -> Optional[bytes]:
        """A numbered batch refused for its numbers, to send again — or
        ``None``, not to. Numbered in an epoch the partition left since: it
        takes the partition's next numbers. A gap before it while an
        earlier batch is still unanswered: as it is, after that one (which
        is resent first, if refused). A gap with nothing earlier pending
        (batches before it were given up on): the partition starts afresh,
        in a new epoch from sequence 0. An epoch fenced otherwise: not."""
        epoch = struct.unpack_from(">h", payload, 51)[0]
        if epoch < self._epoch[p]:
            return batch.renumber(payload, self._number(p, count))
        if error != ErrorCode.OUT_OF_ORDER_SEQUENCE:
            return None
        if any(entry[5] < order for entry in self._on_wire(p)):
            return payload
        if self._epoch[p] >= 0x7FFF:
            return None
        self._epoch[p] += 1
        self._sequence[p] = 0
        return batch.renumber(payload, self._number(p, count))

    def _settle_fire_and_forget(self, conn: Connection, queue: Deque[_InFlight]) -> None:
        # Successes are silent; a failure is answered in its place, so every
        # error frame arrives before this Metadata request's answer.
        b = flatbuffers.Builder(64)
        MetadataRequest.Start(b)
        marker = conn.send(Api.METADATA, _finish(b, MetadataRequest.End(b)))
        sent = {entry[0]: entry[1] for entry in queue}
        queue.clear()
        failed = 0
        while True:
            request_id, error, header, _ = conn.recv()
            if request_id == marker:
                break
            if error:
                count = sent.pop(request_id, 1)
                failed += count
                if self._first_error is None:
                    self._first_error = broker_error(error, header)
        self.failed += failed
        self.acked += sum(sent.values())

    def flush(self) -> int:
        """Sends every batch and waits for their answers; returns how many
        messages were acknowledged in all. Raises the first failure."""
        for p in list(self._batches):
            self._send_batch(p)
        # A resend may go to another connection: go round until all are done.
        while any(self._in_flight.values()):
            for address in list(self._in_flight):
                queue = self._in_flight[address]
                conn = self._connection(address)
                if self.acks == "none" and queue:
                    self._settle_fire_and_forget(conn, queue)
                while queue:
                    # Opened again if a read found it broken.
                    self._read_one(self._connection(address), queue)
        error, self._first_error = self._first_error, None
        if error is not None:
            if self.unknown and isinstance(error, ConnectionFailed):
                raise ConnectionFailed(f"{self.unknown} messages' outcome unknown: {error}")
            raise error
        return self.acked

    def close(self) -> None:
        """Flushes, then closes the producer's connections."""
        try:
            self.flush()
        finally:
            for conn in self._conns.values():
                conn.close()
            self._conns.clear()


class Truncation(NamedTuple):
    """Messages a consumer had read that are gone from the partition: an
    unclean election made a replica that lacked them the leader, and the
    log was cut at ``start``, below the consumer's position ``end``.
    Offsets from ``start`` on hold other messages now; the consumer goes on
    from ``start``."""

    topic: str
    partition: int
    start: int
    end: int


#: Truncations a consumer keeps until they are taken (one per unclean
#: election under it: a handful, bounded anyway).
TRUNCATIONS_KEPT = 64


class Consumer:
    """Reads one partition from an offset: the paper's stateless consumer.

    ``offset`` is a byte offset, ``"earliest"`` or ``"latest"``. Each
    :meth:`poll` fetches up to ``max_bytes`` (waiting up to ``max_wait_ms``
    when caught up) and returns the whole messages in it, every CRC checked;
    :attr:`position` is the offset to resume from (keep it to checkpoint).
    A chunk may end mid-message or at a segment boundary: the next poll
    continues from the last whole message. Iterating a consumer polls
    forever.

    On a replicated partition each fetch carries the leader epoch of the
    last message consumed (KIP-320); when an unclean election cut the log
    under the position, the leader says where that epoch ends, and the
    consumer records a :class:`Truncation` (:meth:`take_truncations`),
    moves back there and goes on.
    """

    def __init__(
        self,
        client: Client,
        topic: str,
        partition: int,
        offset: Union[int, str] = "earliest",
        *,
        max_bytes: int = 1 << 20,
        max_wait_ms: int = 500,
    ) -> None:
        self.client = client
        self.topic = topic
        self.partition = partition
        self.max_bytes = max_bytes
        self.max_wait_ms = max_wait_ms
        metadata = client.metadata([topic])
        info = metadata.topics.get(topic)
        if info is None or partition >= len(info.partitions):
            raise BrokerError(8, f"no partition {partition} of topic {topic!r}")
        self.conn = client.connection(client.partition_address(metadata, topic, partition))
        self.topic_id = info.id
        if isinstance(offset, str):
            offset = client.list_offsets(topic, partition, offset).offset
        self.position = offset
        self.flushed_offset = 0
        self._topic = topic
        #: The leader epoch of the last message consumed (-1: unknown).
        self.epoch = -1
        self._truncations: List[Truncation] = []

    def seek(self, offset: int, leader_epoch: int = -1) -> None:
        """Continues from ``offset`` (a message boundary); ``leader_epoch``
        is the epoch of the message before it, when known (a committed
        offset's), so a log cut under it is noticed."""
        self.position = offset
        self.epoch = max(leader_epoch, -1)

    def take_truncations(self) -> List[Truncation]:
        """The truncations seen since the last call (oldest first)."""
        taken, self._truncations = self._truncations, []
        return taken

    @property
    def at_end(self) -> bool:
        """True when the last fetch reached the flushed end."""
        return self.position >= self.flushed_offset

    def poll(self, max_wait_ms: Optional[int] = None) -> List[Message]:
        """One fetch at :attr:`position`; the whole messages it returned."""
        header, chunk = self._fetch(max_wait_ms)
        r = FetchResponse.FetchResponse.GetRootAs(header, 0)
        diverging, end = r.DivergingEpoch(), r.DivergingEndOffset()
        if diverging >= 0 and end < self.position:
            # The log was cut under the position: continue where the
            # consumed epoch ends, and say what was lost.
            if len(self._truncations) < TRUNCATIONS_KEPT:
                self._truncations.append(Truncation(self.topic, self.partition, end, self.position))
            self.position, self.epoch = end, diverging
            header, chunk = self._fetch(max_wait_ms)
            r = FetchResponse.FetchResponse.GetRootAs(header, 0)
            if r.DivergingEpoch() >= 0 and r.DivergingEndOffset() < self.position:
                raise ProtocolError(
                    f"{self.topic}-{self.partition}: the leader reported the log cut under offset "
                    f"{self.position} twice in a row"
                )
        return self._messages(r, chunk)

    def _messages(self, r: "FetchResponse.FetchResponse", chunk: bytes) -> List[Message]:
        """The whole messages of a fetch answer, the position moved past
        them."""
        self.flushed_offset = r.FlushedOffset()
        before = self.position
        messages = self._decode(r, chunk)
        if self.position > before and r.ChunkEpoch() >= 0:
            self.epoch = r.ChunkEpoch()
        return messages

    def _fetch(self, max_wait_ms: Optional[int]) -> Tuple[bytes, bytes]:
        """One Fetch at the position, with the consumed epoch."""
        b = flatbuffers.Builder(64)
        t = b.CreateString(self._topic)
        i = b.CreateString(self.topic_id) if self.topic_id else None
        FetchRequest.Start(b)
        if i is not None:
            # Positions belong to this topic, not to one created since.
            FetchRequest.AddTopicId(b, i)
        FetchRequest.AddTopic(b, t)
        FetchRequest.AddPartition(b, self.partition)
        FetchRequest.AddOffset(b, self.position)
        FetchRequest.AddMaxBytes(b, self.max_bytes)
        FetchRequest.AddMaxWaitMs(b, self.max_wait_ms if max_wait_ms is None else max_wait_ms)
        FetchRequest.AddLastFetchedEpoch(b, self.epoch)
        return self.conn.call(Api.FETCH, _finish(b, FetchRequest.End(b)))

    def _decode(self, r: "FetchResponse.FetchResponse", chunk: bytes) -> List[Message]:
        if r.MessageFormat() == 2:
            return self._batches(r.Offset(), chunk)
        messages, next_offset = codec.decode_messages(chunk, self.position)
        if not messages and chunk and len(chunk) >= self.max_bytes:
            raise RinglogError(
                f"the message at offset {self.position} is larger than max_bytes "
                f"({self.max_bytes}); raise the consumer's max_bytes"
            )
        if not messages and chunk:
            # Segment ends and the flushed end never cut a message, and
            # max_bytes did not either: the offset is inside a message.
            raise codec.CorruptMessage(
                self.position,
                "no whole message starts here: damaged data, or not a message boundary",
            )
        self.position = next_offset
        return messages

    def _batches(self, chunk_offset: int, chunk: bytes) -> List[Message]:
        """Format 2: the records of the chunk's whole batches from the
        position on (the chunk starts at the batch that holds it)."""
        try:
            records, next_offset, need = batch.decode_batches(chunk, chunk_offset, self.position)
        except batch.BatchError as e:
            raise codec.CorruptMessage(self.position, str(e)) from e
        if need and need > self.max_bytes:
            raise RinglogError(
                f"the batch at offset {chunk_offset} is {need} bytes, larger than max_bytes "
                f"({self.max_bytes}); raise the consumer's max_bytes"
            )
        if need and chunk_offset + len(chunk) >= self.flushed_offset:
            raise codec.CorruptMessage(self.position, "a batch cut at the flushed end: damaged data")
        self.position = next_offset
        return [
            Message(r.offset, r.key, r.value if r.value is not None else b"", r.timestamp, r.headers)
            for r in records
        ]

    def __iter__(self) -> Iterator[Message]:
        while True:
            yield from self.poll()
