"""The group consumer: the paper's Algorithm 1, as PROTOCOL.md specifies it.

Members of a group divide the partitions of their topics among themselves
without a leader: each heartbeat returns the group's view (members, topics,
partition counts), every member computes the same range assignment from it,
releases what it no longer gets and claims what it newly gets, and resumes
each partition at its last committed offset. A cluster is needed (a
standalone broker answers CLUSTER_REQUIRED).

A broker's death is a partial outage: a partition whose broker is down (or
moving) is retried with back-off while the member goes on consuming its
other partitions, and a coordinator that does not answer (the group's
connection broke, etcd away, CLUSTER_ID_MISMATCH) is retried the same way
while the member consumes what it owns. :meth:`GroupConsumer.outages` says
what is unavailable, since when and why.
"""

from __future__ import annotations

import random
import time
from typing import Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

import flatbuffers

from .client import Client, Connection, Consumer, _finish
from .errors import BrokerError, ErrorCode, RinglogError, passes
from .wire import ClaimPartitionsRequest, CommitOffsetsRequest, DescribeGroupRequest
from .wire import DescribeGroupResponse, HeartbeatRequest, HeartbeatResponse
from .wire import JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest, PartitionOffset
from .wire import ReleasePartitionsRequest

JOIN_GROUP, HEARTBEAT, CLAIM, RELEASE, COMMIT, LEAVE, DESCRIBE = 7, 8, 9, 10, 11, 12, 13

TopicPartition = Tuple[str, int]


class GroupMessage(NamedTuple):
    """A message read by a group member, with where it came from."""

    topic: str
    partition: int
    offset: int
    key: Optional[bytes]
    value: bytes
    #: Message format 2: its time (ms since the Unix epoch) and headers.
    timestamp: Optional[int] = None
    headers: Tuple[Tuple[str, Optional[bytes]], ...] = ()


class View(NamedTuple):
    """A group's view: what every member computes its share from."""

    generation: int
    revision: int
    members: List[Tuple[str, List[str]]]
    partitions: Dict[str, int]


def assignment(view: View, member_id: str, topics: Sequence[str]) -> Set[TopicPartition]:
    """The partitions ``member_id`` gets in ``view`` (PROTOCOL.md's ranges)."""
    mine: Set[TopicPartition] = set()
    for topic in topics:
        count = view.partitions.get(topic, 0)
        members = sorted(
            (m for m, subscribed in view.members if topic in subscribed), key=lambda m: m.encode()
        )
        if count == 0 or member_id not in members:
            continue
        i, n = members.index(member_id), len(members)
        start = i * (count // n) + min(i, count % n)
        length = count // n + (1 if i < count % n else 0)
        mine.update((topic, p) for p in range(start, start + length))
    return mine


def _decode_view(view) -> View:
    members = []
    for i in range(view.MembersLength()):
        m = view.Members(i)
        members.append(
            ((m.MemberId() or b"").decode(), [m.Topics(j).decode() for j in range(m.TopicsLength())])
        )
    partitions = {}
    for i in range(view.TopicsLength()):
        t = view.Topics(i)
        partitions[(t.Name() or b"").decode()] = t.Partitions()
    return View(view.Generation(), view.Revision(), members, partitions)


class _Outage:
    """Something that failed and is retried with back-off (0.1 s doubling
    to 2 s)."""

    def __init__(self, error: Exception) -> None:
        self.since = time.monotonic()
        self.attempts = 1
        self.error = error
        self.retry_at = self.since + 0.1

    def again(self, error: Exception) -> None:
        self.error = error
        self.retry_at = time.monotonic() + min(0.1 * 2**self.attempts, 2.0)
        self.attempts += 1

    def due(self) -> bool:
        return time.monotonic() >= self.retry_at

    def seconds(self) -> float:
        return time.monotonic() - self.since


class GroupConsumer:
    """Consumes ``topics`` as a member of ``group``; call :meth:`poll`.

    - ``start``: ``"earliest"`` or ``"latest"``, for partitions the group has
      no committed offset for.
    - Offsets are committed for what :meth:`poll` returned, at the next
      poll (every ``commit_interval`` seconds) and always before a partition
      is released: delivery is at least once.
    - :meth:`close` commits, releases and leaves, so the others take over at
      once; a member that just stops is replaced after its session timeout.

    >>> member = GroupConsumer(client, "billing", ["clicks"])  # doctest: +SKIP
    >>> for m in member.poll():                                # doctest: +SKIP
    ...     handle(m.topic, m.partition, m.value)
    """

    def __init__(
        self,
        client: Client,
        group: str,
        topics: Sequence[str],
        *,
        member_name: str = "python",
        session_timeout_ms: int = 10_000,
        start: str = "earliest",
        max_bytes: int = 1 << 20,
        commit_interval: float = 1.0,
    ) -> None:
        if start not in ("earliest", "latest"):
            raise ValueError(f"start must be 'earliest' or 'latest', got {start!r}")
        self.client = client
        self.group = group
        self.topics = list(topics)
        self.start = start
        self.max_bytes = max_bytes
        self.commit_interval = commit_interval
        self.member_name = member_name
        self.requested_timeout_ms = session_timeout_ms
        # Its own connection: group requests never wait behind fetches.
        self.conn = client.open(client.conn.address)
        self._join()
        self.heartbeat_every = min(1.0, self.session_timeout_ms / 3000)
        self.generation = 0
        # An owned partition's consumer, or None while its broker does not
        # answer (then ``positions`` says where it continues).
        self.owned: Dict[TopicPartition, Optional[Consumer]] = {}
        self.positions: Dict[TopicPartition, object] = {}
        self.unavailable: Dict[TopicPartition, _Outage] = {}
        self.coordinator: Optional[_Outage] = None
        self.committed: Dict[TopicPartition, int] = {}
        self._next = 0
        self._last_heartbeat = 0.0
        self._last_commit = time.monotonic()
        self._rebalance(self._heartbeat(0))

    # ---- requests ----

    def _call(self, api: int, header: bytes) -> Tuple[bytes, bytes]:
        """A group request on the group's connection; a broken connection
        is replaced (through any broker that answers) for the next one."""
        if self.conn.broken:
            self.client.reconnect()
            self.conn = self.client.open(self.client.conn.address)
        return self.conn.call(api, header)

    def _join(self) -> None:
        b = flatbuffers.Builder(256)
        g, name = b.CreateString(self.group), b.CreateString(self.member_name)
        names = [b.CreateString(t) for t in self.topics]
        JoinGroupRequest.StartTopicsVector(b, len(names))
        for n in reversed(names):
            b.PrependUOffsetTRelative(n)
        topics_vector = b.EndVector()
        JoinGroupRequest.Start(b)
        JoinGroupRequest.AddGroup(b, g)
        JoinGroupRequest.AddMemberName(b, name)
        JoinGroupRequest.AddTopics(b, topics_vector)
        JoinGroupRequest.AddSessionTimeoutMs(b, self.requested_timeout_ms)
        header, _ = self._call(JOIN_GROUP, _finish(b, JoinGroupRequest.End(b)))
        joined = JoinGroupResponse.JoinGroupResponse.GetRootAs(header, 0)
        self.member_id = (joined.MemberId() or b"").decode()
        self.session_id = joined.SessionId()
        self.session_timeout_ms = joined.SessionTimeoutMs()

    def _rejoin(self) -> None:
        # The session lapsed (the member stalled past its timeout): its
        # partitions already went to others and its uncommitted progress is
        # theirs to redo. Start over as a new member.
        self.owned.clear()
        self.positions.clear()
        self.unavailable.clear()
        self.committed.clear()
        self.generation = 0
        self._join()
        self._rebalance(self._heartbeat(0))

    def _heartbeat(self, generation: int) -> View:
        b = flatbuffers.Builder(128)
        g, m = b.CreateString(self.group), b.CreateString(self.member_id)
        HeartbeatRequest.Start(b)
        HeartbeatRequest.AddGroup(b, g)
        HeartbeatRequest.AddMemberId(b, m)
        HeartbeatRequest.AddSessionId(b, self.session_id)
        HeartbeatRequest.AddGeneration(b, generation)
        HeartbeatRequest.AddMaxWaitMs(b, 0)
        # An unchanged view comes back brief (its generation only): this
        # member asks with the generation it acted on, so it never needs
        # the rest of a view it already has.
        HeartbeatRequest.AddBriefOk(b, True)
        header, _ = self._call(HEARTBEAT, _finish(b, HeartbeatRequest.End(b)))
        self._last_heartbeat = time.monotonic()
        return _decode_view(HeartbeatResponse.HeartbeatResponse.GetRootAs(header, 0).View())

    def _partitions_request(self, api: int, topic: str, partitions: List[int], revision: int) -> None:
        module = ClaimPartitionsRequest if api == CLAIM else ReleasePartitionsRequest
        b = flatbuffers.Builder(128)
        g, m, t = b.CreateString(self.group), b.CreateString(self.member_id), b.CreateString(topic)
        module.StartPartitionsVector(b, len(partitions))
        for p in reversed(partitions):
            b.PrependUint32(p)
        vector = b.EndVector()
        module.Start(b)
        module.AddGroup(b, g)
        module.AddMemberId(b, m)
        module.AddSessionId(b, self.session_id)
        if api == CLAIM:
            module.AddRevision(b, revision)
        module.AddTopic(b, t)
        module.AddPartitions(b, vector)
        self._call(api, _finish(b, module.End(b)))

    def _committed_offsets(self) -> Dict[TopicPartition, int]:
        b = flatbuffers.Builder(64)
        g = b.CreateString(self.group)
        DescribeGroupRequest.Start(b)
        DescribeGroupRequest.AddGroup(b, g)
        header, _ = self._call(DESCRIBE, _finish(b, DescribeGroupRequest.End(b)))
        r = DescribeGroupResponse.DescribeGroupResponse.GetRootAs(header, 0)
        out = {}
        for i in range(r.PartitionsLength()):
            p = r.Partitions(i)
            if p.Committed():
                out[((p.Topic() or b"").decode(), p.Partition())] = p.Offset()
        return out

    def commit(self) -> None:
        """Commits the position of every owned partition that moved."""
        moved = {}
        for tp in self.owned:
            position = self._position(tp)
            if isinstance(position, int) and self.committed.get(tp) != position:
                moved[tp] = position
        if not moved:
            return
        b = flatbuffers.Builder(256)
        g, m = b.CreateString(self.group), b.CreateString(self.member_id)
        entries = []
        for (topic, partition), offset in moved.items():
            t = b.CreateString(topic)
            PartitionOffset.Start(b)
            PartitionOffset.AddTopic(b, t)
            PartitionOffset.AddPartition(b, partition)
            PartitionOffset.AddOffset(b, offset)
            entries.append(PartitionOffset.End(b))
        CommitOffsetsRequest.StartOffsetsVector(b, len(entries))
        for e in reversed(entries):
            b.PrependUOffsetTRelative(e)
        vector = b.EndVector()
        CommitOffsetsRequest.Start(b)
        CommitOffsetsRequest.AddGroup(b, g)
        CommitOffsetsRequest.AddMemberId(b, m)
        CommitOffsetsRequest.AddSessionId(b, self.session_id)
        CommitOffsetsRequest.AddOffsets(b, vector)
        self._call(COMMIT, _finish(b, CommitOffsetsRequest.End(b)))
        self.committed.update(moved)
        self._last_commit = time.monotonic()

    # ---- the rebalance ----

    def _release(self, gone: Set[TopicPartition]) -> None:
        if not gone:
            return
        self.commit()
        for topic in {t for t, _ in gone}:
            self._partitions_request(RELEASE, topic, sorted(p for t, p in gone if t == topic), 0)
        for tp in gone:
            self.owned.pop(tp, None)
            self.positions.pop(tp, None)
            self.unavailable.pop(tp, None)
            self.committed.pop(tp, None)

    def _rebalance(self, view: View) -> None:
        backoff = 0.05
        for _ in range(100):
            mine = assignment(view, self.member_id, self.topics)
            self._release(set(self.owned) - mine)
            new = mine - set(self.owned)
            try:
                for topic in sorted({t for t, _ in new}):
                    self._partitions_request(
                        CLAIM, topic, sorted(p for t, p in new if t == topic), view.revision
                    )
            except BrokerError as e:
                if e.code != ErrorCode.CLAIM_CONFLICT:
                    raise
                # Someone joined after this view, or an owner has not let go
                # yet: give everything back, wait, and start from a new view.
                self._release(set(self.owned))
                time.sleep(backoff + random.uniform(0, backoff / 2))
                backoff = min(backoff * 2, 2.0)
                view = self._heartbeat(0)
                continue
            committed = self._committed_offsets() if new else {}
            for tp in new:
                # Opened at the next poll: a broker that is down delays
                # only its own partitions.
                self.owned[tp] = None
                self.positions[tp] = committed.get(tp, self.start)
                if tp in committed:
                    self.committed[tp] = committed[tp]
            self.generation = view.generation
            return
        raise BrokerError(ErrorCode.CLAIM_CONFLICT, "could not claim a share after 100 tries")

    # ---- consuming ----

    def poll(self) -> List[GroupMessage]:
        """Heartbeats and rebalances when due, commits what earlier polls
        returned, and returns the messages of one fetch (from the owned
        partitions in turn; empty when all are caught up). Partitions whose
        broker is down, and a coordinator that does not answer, are retried
        with back-off while the rest goes on (see :meth:`outages`)."""
        now = time.monotonic()
        if self.coordinator is None or self.coordinator.due():
            try:
                if now - self._last_commit >= self.commit_interval:
                    self.commit()
                if now - self._last_heartbeat >= self.heartbeat_every:
                    view = self._heartbeat(self.generation)
                    if view.generation != self.generation:
                        try:
                            self._rebalance(view)
                        except Exception:
                            self.generation = 0  # half done: rebalance again
                            raise
                self.coordinator = None
            except BrokerError as e:
                if e.code in (ErrorCode.UNKNOWN_MEMBER, ErrorCode.NOT_PARTITION_OWNER):
                    self._rejoin_or_wait()
                elif e.retriable or e.code == ErrorCode.CLUSTER_ID_MISMATCH:
                    self._coordinator_away(e)
                else:
                    raise
            except RinglogError as e:
                if not passes(e):
                    raise
                self._coordinator_away(e)
        owned = sorted(self.owned)
        for i in range(len(owned)):
            tp = owned[(self._next + i) % len(owned)]
            messages = self._read(tp)
            if messages:
                self._next = (self._next + i + 1) % len(owned)
                return [
                    GroupMessage(tp[0], tp[1], m.offset, m.key, m.value, m.timestamp, m.headers)
                    for m in messages
                ]
        return []

    def _rejoin_or_wait(self) -> None:
        try:
            self._rejoin()
            self.coordinator = None
        except RinglogError as e:
            if not (passes(e) or getattr(e, "code", None) == ErrorCode.CLUSTER_ID_MISMATCH):
                raise
            self._coordinator_away(e)

    def _coordinator_away(self, error: Exception) -> None:
        if self.coordinator is None:
            self.coordinator = _Outage(error)
        else:
            self.coordinator.again(error)

    def _position(self, tp: TopicPartition) -> object:
        consumer = self.owned.get(tp)
        return consumer.position if consumer is not None else self.positions.get(tp)

    def _read(self, tp: TopicPartition) -> list:
        """One fetch of an owned partition, opening its consumer first if
        needed; an outage of its broker is noted, not raised."""
        outage = self.unavailable.get(tp)
        if outage is not None and not outage.due():
            return []
        try:
            consumer = self.owned.get(tp)
            if consumer is None:
                consumer = Consumer(
                    self.client, tp[0], tp[1], self.positions[tp],
                    max_bytes=self.max_bytes, max_wait_ms=0,
                )
                self.owned[tp] = consumer
            messages = consumer.poll(max_wait_ms=0)
            self.unavailable.pop(tp, None)
            return messages
        except RinglogError as e:
            if not passes(e):
                raise
            consumer = self.owned.get(tp)
            if consumer is not None:
                self.positions[tp] = consumer.position
                self.owned[tp] = None
            if outage is None:
                self.unavailable[tp] = _Outage(e)
            else:
                outage.again(e)
            return []

    def outages(self) -> List[Tuple[Optional[TopicPartition], float, str]]:
        """What this member cannot reach now: ``(partition, seconds, error)``
        for each owned partition whose broker does not answer, and
        ``(None, seconds, error)`` for the coordinator."""
        out: List[Tuple[Optional[TopicPartition], float, str]] = [
            (tp, o.seconds(), str(o.error)) for tp, o in sorted(self.unavailable.items())
        ]
        if self.coordinator is not None:
            out.append((None, self.coordinator.seconds(), str(self.coordinator.error)))
        return out

    def assigned(self) -> List[TopicPartition]:
        """The partitions this member owns now."""
        return sorted(self.owned)

    def close(self) -> None:
        """Commits, releases everything and leaves the group."""
        try:
            self._release(set(self.owned))
        finally:
            b = flatbuffers.Builder(64)
            g, m = b.CreateString(self.group), b.CreateString(self.member_id)
            LeaveGroupRequest.Start(b)
            LeaveGroupRequest.AddGroup(b, g)
            LeaveGroupRequest.AddMemberId(b, m)
            LeaveGroupRequest.AddSessionId(b, self.session_id)
            self._call(LEAVE, _finish(b, LeaveGroupRequest.End(b)))
            self.conn.close()
