"""The admin requests the Rust client has: users (AlterUsers, ListUsers),
access control rules (CreateAcls, DeleteAcls, DescribeAcls), quotas at run
time (AlterQuotas, DescribeQuotas) and topic settings at run time
(AlterTopicConfig). ``Client`` takes them from ``AdminRequests``.

Rules travel in their text form, as ``ringlog acl`` prints them::

    allow User:alice read topic:clicks
    deny User:* write topic-prefix:logs.
"""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import flatbuffers

from . import scram
from .codec import Api
from .wire import AclRule as _AclRule
from .wire import AlterQuotasRequest, AlterQuotasResponse, AlterTopicConfigRequest
from .wire import AlterTopicConfigResponse, AlterUsersRequest, AlterUsersResponse
from .wire import ConfigEntry, CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest
from .wire import DeleteAclsResponse, DescribeAclsRequest, DescribeAclsResponse
from .wire import DescribeQuotasRequest, DescribeQuotasResponse, ListUsersRequest
from .wire import ListUsersResponse, QuotaEntry as _QuotaEntry, UserCredential

_OPERATIONS = ["all", "read", "write", "create", "delete", "alter", "describe"]
_RESOURCES = {"cluster": 1, "topic": 2, "group": 3}
_RESOURCE_WORDS = {number: word for word, number in _RESOURCES.items()}


class Quota(NamedTuple):
    """One principal's quota (0: no bound): ``principal`` is ``User:NAME``
    or ``"default"`` (every principal without its own)."""

    principal: str
    produce_bytes_per_second: int = 0
    fetch_bytes_per_second: int = 0
    requests_per_second: int = 0
    connections: int = 0


def _rule_fields(text: str) -> Tuple[str, str, int, int, str, int]:
    """(permission, principal, operation, resource type, name, pattern) of
    a rule's text form; ValueError naming what is wrong."""
    words = text.split()
    if len(words) != 4:
        raise ValueError(f"{text!r} is not `allow|deny PRINCIPAL OPERATION TYPE:NAME`")
    permission, principal, operation, resource = words
    if permission not in ("allow", "deny"):
        raise ValueError(f"{permission!r} is neither allow nor deny")
    if operation not in _OPERATIONS:
        raise ValueError(f"unknown operation {operation!r}: {', '.join(_OPERATIONS)}")
    kind, sep, name = resource.partition(":")
    if not sep:
        raise ValueError(f"{resource!r} is not TYPE:NAME")
    pattern = 0
    if kind.endswith("-prefix"):
        kind, pattern = kind[: -len("-prefix")], 1
    if kind not in _RESOURCES:
        raise ValueError(f"unknown resource type {kind!r}: cluster, topic or group")
    return permission, principal, _OPERATIONS.index(operation), _RESOURCES[kind], name, pattern


def _encode_rules(b: flatbuffers.Builder, rules: Sequence[str]) -> int:
    offsets = []
    for text in rules:
        permission, principal, operation, resource, name, pattern = _rule_fields(text)
        p = b.CreateString(principal)
        n = b.CreateString(name)
        _AclRule.Start(b)
        _AclRule.AddPrincipal(b, p)
        _AclRule.AddResourceType(b, resource)
        _AclRule.AddResourceName(b, n)
        _AclRule.AddPattern(b, pattern)
        _AclRule.AddOperation(b, operation)
        _AclRule.AddPermission(b, 0 if permission == "allow" else 1)
        offsets.append(_AclRule.End(b))
    return _tables(b, offsets)


def _rule_text(rule: "_AclRule.AclRule") -> str:
    permission = "allow" if rule.Permission() == 0 else "deny"
    suffix = "-prefix" if rule.Pattern() == 1 else ""
    return (
        f"{permission} {(rule.Principal() or b'').decode()} {_OPERATIONS[rule.Operation()]} "
        f"{_RESOURCE_WORDS.get(rule.ResourceType(), '?')}{suffix}:{(rule.ResourceName() or b'').decode()}"
    )


def _tables(b: flatbuffers.Builder, offsets: Sequence[int]) -> int:
    """A vector of tables (or strings) already built."""
    b.StartVector(4, len(offsets), 4)
    for offset in reversed(offsets):
        b.PrependUOffsetTRelative(offset)
    return b.EndVector()


def _strings(b: flatbuffers.Builder, items: Sequence[str]) -> int:
    return _tables(b, [b.CreateString(s) for s in items])


def _finish(b: flatbuffers.Builder, root: int) -> bytes:
    b.Finish(root)
    return bytes(b.Output())


def _quotas(entries_length: int, entry) -> List[Quota]:  # type: ignore[no-untyped-def]
    out = []
    for i in range(entries_length):
        e = entry(i)
        out.append(
            Quota(
                (e.Principal() or b"").decode(),
                e.ProduceBytesPerSecond(),
                e.FetchBytesPerSecond(),
                e.RequestsPerSecond(),
                e.Connections(),
            )
        )
    return out


class AdminRequests:
    """The admin requests; a ``Client`` has them (``call`` and
    ``describe_topic`` are the client's)."""

    def alter_users(
        self,
        upserts: Optional[Dict[str, bytes]] = None,
        deletions: Sequence[str] = (),
        *,
        iterations: int = scram.ITERATIONS_DEFAULT,
    ) -> Tuple[int, int]:
        """Adds users, or replaces their passwords (``{name: password}``;
        the SCRAM credential is computed here, a password never crosses the
        wire), and removes ``deletions``; returns (upserted, deleted)."""
        b = flatbuffers.Builder(256)
        credentials = []
        for name, password in (upserts or {}).items():
            n = b.CreateString(name)
            c = b.CreateString(scram.credential(password, iterations))
            UserCredential.Start(b)
            UserCredential.AddName(b, n)
            UserCredential.AddCredential(b, c)
            credentials.append(UserCredential.End(b))
        upserted = _tables(b, credentials)
        deleted = _strings(b, deletions)
        AlterUsersRequest.Start(b)
        AlterUsersRequest.AddUpserts(b, upserted)
        AlterUsersRequest.AddDeletions(b, deleted)
        header, _ = self.call(Api.ALTER_USERS, _finish(b, AlterUsersRequest.End(b)), repeatable=True)  # type: ignore[attr-defined]
        answer = AlterUsersResponse.AlterUsersResponse.GetRootAs(header, 0)
        return answer.Upserted(), answer.Deleted()

    def list_users(self) -> List[str]:
        """Every user's name, sorted."""
        b = flatbuffers.Builder(16)
        ListUsersRequest.Start(b)
        header, _ = self.call(Api.LIST_USERS, _finish(b, ListUsersRequest.End(b)), repeatable=True)  # type: ignore[attr-defined]
        answer = ListUsersResponse.ListUsersResponse.GetRootAs(header, 0)
        return [answer.Users(i).decode() for i in range(answer.UsersLength())]

    def create_acls(self, rules: Sequence[str]) -> int:
        """Adds rules (their text form); returns how many were new."""
        b = flatbuffers.Builder(256)
        encoded = _encode_rules(b, rules)
        CreateAclsRequest.Start(b)
        CreateAclsRequest.AddRules(b, encoded)
        header, _ = self.call(Api.CREATE_ACLS, _finish(b, CreateAclsRequest.End(b)), repeatable=True)  # type: ignore[attr-defined]
        return CreateAclsResponse.CreateAclsResponse.GetRootAs(header, 0).Created()

    def delete_acls(self, rules: Sequence[str]) -> int:
        """Removes rules where they exist exactly so; returns how many."""
        b = flatbuffers.Builder(256)
        encoded = _encode_rules(b, rules)
        DeleteAclsRequest.Start(b)
        DeleteAclsRequest.AddRules(b, encoded)
        header, _ = self.call(Api.DELETE_ACLS, _finish(b, DeleteAclsRequest.End(b)), repeatable=True)  # type: ignore[attr-defined]
        return DeleteAclsResponse.DeleteAclsResponse.GetRootAs(header, 0).Deleted()

    def describe_acls(
        self, principal: str = "", resource_type: str = "", resource_name: str = ""
    ) -> List[str]:
        """The rules (text form) of this principal, resource type
        (``topic``, ``group``, ``cluster``) and name; empty matches all."""
        if resource_type and resource_type not in _RESOURCES:
            raise ValueError(f"unknown resource type {resource_type!r}: cluster, topic or group")
        b = flatbuffers.Builder(128)
        p = b.CreateString(principal) if principal else None
        n = b.CreateString(resource_name) if resource_name else None
        DescribeAclsRequest.Start(b)
        if p is not None:
            DescribeAclsRequest.AddPrincipal(b, p)
        DescribeAclsRequest.AddResourceType(b, _RESOURCES.get(resource_type, 0))
        if n is not None:
            DescribeAclsRequest.AddResourceName(b, n)
        header, _ = self.call(Api.DESCRIBE_ACLS, _finish(b, DescribeAclsRequest.End(b)), repeatable=True)  # type: ignore[attr-defined]
        answer = DescribeAclsResponse.DescribeAclsResponse.GetRootAs(header, 0)
        return [_rule_text(answer.Rules(i)) for i in range(answer.RulesLength())]

    def alter_quotas(self, set: Sequence[Quota] = (), delete: Sequence[str] = ()) -> Tuple[int, int]:  # noqa: A002
        """Sets each principal's whole quota, or removes principals' quotas
        (one or the other); every broker applies them within about a
        second. Returns (set, deleted)."""
        b = flatbuffers.Builder(256)
        entries = []
        for quota in set:
            p = b.CreateString(quota.principal)
            _QuotaEntry.Start(b)
            _QuotaEntry.AddPrincipal(b, p)
            _QuotaEntry.AddProduceBytesPerSecond(b, quota.produce_bytes_per_second)
            _QuotaEntry.AddFetchBytesPerSecond(b, quota.fetch_bytes_per_second)
            _QuotaEntry.AddRequestsPerSecond(b, quota.requests_per_second)
            _QuotaEntry.AddConnections(b, quota.connections)
            entries.append(_QuotaEntry.End(b))
        encoded = _tables(b, entries)
        names = _strings(b, delete)
        AlterQuotasRequest.Start(b)
        AlterQuotasRequest.AddSet(b, encoded)
        AlterQuotasRequest.AddDelete(b, names)
        header, _ = self.call(Api.ALTER_QUOTAS, _finish(b, AlterQuotasRequest.End(b)), repeatable=True)  # type: ignore[attr-defined]
        answer = AlterQuotasResponse.AlterQuotasResponse.GetRootAs(header, 0)
        return answer.Set(), answer.Deleted()

    def describe_quotas(self) -> Tuple[List[Quota], List[Quota]]:
        """(the quotas set at run time, the answering broker's configured
        ones)."""
        b = flatbuffers.Builder(16)
        DescribeQuotasRequest.Start(b)
        header, _ = self.call(Api.DESCRIBE_QUOTAS, _finish(b, DescribeQuotasRequest.End(b)), repeatable=True)  # type: ignore[attr-defined]
        answer = DescribeQuotasResponse.DescribeQuotasResponse.GetRootAs(header, 0)
        return (
            _quotas(answer.QuotasLength(), answer.Quotas),
            _quotas(answer.ConfiguredLength(), answer.Configured),
        )

    def alter_topic_config(
        self, topic: str, set: Optional[Dict[str, str]] = None, delete: Sequence[str] = ()  # noqa: A002
    ):  # type: ignore[no-untyped-def]
        """Changes a topic's settings while it runs, by Kafka's names
        (``retention.ms``, ``retention.bytes`` (-1: no limit),
        ``segment.bytes``, ``flush.messages``, ``flush.ms``,
        ``min.insync.replicas``): ``set`` overrides the broker's default,
        ``delete`` returns to it. All or nothing; answered once every live
        broker applies it; returns the topic as it is now."""
        b = flatbuffers.Builder(256)
        t = b.CreateString(topic)
        entries = []
        for name, value in (set or {}).items():
            n = b.CreateString(name)
            v = b.CreateString(str(value))
            ConfigEntry.Start(b)
            ConfigEntry.AddName(b, n)
            ConfigEntry.AddValue(b, v)
            entries.append(ConfigEntry.End(b))
        encoded = _tables(b, entries)
        names = _strings(b, delete)
        AlterTopicConfigRequest.Start(b)
        AlterTopicConfigRequest.AddTopic(b, t)
        AlterTopicConfigRequest.AddSet(b, encoded)
        AlterTopicConfigRequest.AddDelete(b, names)
        header, _ = self.call(  # type: ignore[attr-defined]
            Api.ALTER_TOPIC_CONFIG, _finish(b, AlterTopicConfigRequest.End(b)), repeatable=True
        )
        AlterTopicConfigResponse.AlterTopicConfigResponse.GetRootAs(header, 0)
        return self.describe_topic(topic)  # type: ignore[attr-defined]
