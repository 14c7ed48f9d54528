"""Errors: the broker's error codes (PROTOCOL.md section 5) and exceptions."""

from __future__ import annotations

import enum
from typing import Optional, Tuple


class ErrorCode(enum.IntEnum):
    """The wire error codes, numbered as in PROTOCOL.md; never renumbered."""

    NONE = 0
    UNKNOWN_API = 1
    UNSUPPORTED_VERSION = 2
    INVALID_REQUEST = 3
    FRAME_TOO_LARGE = 4
    HANDSHAKE_REQUIRED = 5
    INVALID_TOPIC_NAME = 6
    UNKNOWN_TOPIC = 7
    UNKNOWN_PARTITION = 8
    TOPIC_ALREADY_EXISTS = 9
    INVALID_CONFIG = 10
    OFFSET_OUT_OF_RANGE = 11
    CORRUPT_MESSAGE = 12
    MESSAGE_TOO_LARGE = 13
    STORAGE_FAILED = 14
    SHUTTING_DOWN = 15
    OVERLOADED = 16
    INTERNAL = 17
    NOT_OWNER = 18
    COORDINATOR_UNAVAILABLE = 19
    CLUSTER_REQUIRED = 20
    UNKNOWN_MEMBER = 21
    CLAIM_CONFLICT = 22
    NOT_PARTITION_OWNER = 23
    GROUP_NOT_EMPTY = 24
    STORAGE_UNAVAILABLE = 25
    CLUSTER_ID_MISMATCH = 26
    UNKNOWN_TOPIC_ID = 27
    NOT_LEADER = 28
    FENCED_LEADER_EPOCH = 29
    NOT_ENOUGH_REPLICAS = 30
    UNKNOWN_LEADER_EPOCH = 31
    ELECTION_NOT_POSSIBLE = 32
    INVALID_REPLICAS = 33
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 34
    DATA_LOST = 35
    MIRRORED_PARTITION = 36
    AUTHENTICATION_REQUIRED = 37
    AUTHENTICATION_FAILED = 38
    AUTHORIZATION_FAILED = 39
    OUT_OF_ORDER_SEQUENCE = 40
    INVALID_PRODUCER_EPOCH = 41
    NOT_YET_SERVED = 42


#: Codes after which the same request may succeed later.
RETRIABLE = frozenset(
    {
        ErrorCode.SHUTTING_DOWN,
        ErrorCode.OVERLOADED,
        ErrorCode.NOT_OWNER,
        ErrorCode.COORDINATOR_UNAVAILABLE,
        ErrorCode.STORAGE_UNAVAILABLE,
        ErrorCode.NOT_LEADER,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    }
)


class RinglogError(Exception):
    """Base class of every error this package raises."""


class BrokerError(RinglogError):
    """The broker answered a request with an error code.

    ``code`` is an :class:`ErrorCode` (or the raw number, for a code newer
    than this client); ``message`` is the broker's sentence. For
    OFFSET_OUT_OF_RANGE, ``valid_range`` is ``(start_offset, end_offset)``;
    for NOT_OWNER, ``owner_broker_id`` names the broker to ask.
    """

    def __init__(
        self,
        code: int,
        message: str,
        valid_range: Optional[Tuple[int, int]] = None,
        owner_broker_id: Optional[int] = None,
    ) -> None:
        try:
            self.code: int = ErrorCode(code)
            name = self.code.name
        except ValueError:
            self.code = code
            name = f"error {code}"
        self.message = message
        self.valid_range = valid_range
        self.owner_broker_id = owner_broker_id
        super().__init__(f"{name}: {message}")

    @property
    def retriable(self) -> bool:
        """True if retrying the same request later may succeed."""
        return self.code in RETRIABLE


class ConnectionFailed(RinglogError):
    """A broker address could not be reached, or the connection broke."""

    retriable = True


class PartitionUnavailable(RinglogError):
    """The broker that stores a partition is down (Metadata does not list
    it): the partition is unavailable until that broker is back."""

    retriable = True

    def __init__(self, topic: str, partition: int, broker_id: int) -> None:
        self.topic = topic
        self.partition = partition
        self.broker_id = broker_id
        super().__init__(
            f"{topic}-{partition} is stored by broker {broker_id}, which is down: "
            "the partition is unavailable until that broker is back"
        )


def passes(error: BaseException) -> bool:
    """True for an error to ride out with back-off (a broker down, moving,
    restarting or overloaded) rather than to raise."""
    return bool(getattr(error, "retriable", False))


class LoginFailed(RinglogError):
    """This client's side of a login failed: the broker's SCRAM messages did
    not check out, or the user name is not valid. (A broker's refusal is a
    BrokerError with AUTHENTICATION_FAILED.)"""


class ProtocolError(RinglogError):
    """The bytes from the broker break the protocol (a bug, or not a broker)."""


class CorruptMessage(RinglogError):
    """A fetched message failed its length, magic or CRC check."""

    def __init__(self, offset: int, reason: str) -> None:
        self.offset = offset
        super().__init__(f"the message at offset {offset} is not valid: {reason}")
