"""The consumer's side of KIP-320 (issue 46, item 8): each fetch carries the
leader epoch of the last message consumed, and an answer saying the log was
cut under the position moves the consumer back there and records what was
lost — the Rust consumer's rule (protocol/src/client/consumer.rs), checked
here against answers made by hand (an unclean election on demand needs a
cluster; tests/it/truncation.rs does that for the Rust client)."""

from typing import List, Tuple

import flatbuffers
import pytest

import ringlog
from ringlog.client import Consumer
from ringlog.codec import encode_message
from ringlog.wire import FetchRequest, FetchResponse


def answer(offset: int, chunk: bytes, flushed: int, chunk_epoch: int, diverging=(-1, 0)) -> Tuple[bytes, bytes]:
    b = flatbuffers.Builder(64)
    FetchResponse.Start(b)
    FetchResponse.AddOffset(b, offset)
    FetchResponse.AddLength(b, len(chunk))
    FetchResponse.AddFlushedOffset(b, flushed)
    FetchResponse.AddLeaderEpoch(b, max(chunk_epoch, diverging[0]))
    FetchResponse.AddChunkEpoch(b, chunk_epoch)
    FetchResponse.AddDivergingEpoch(b, diverging[0])
    FetchResponse.AddDivergingEndOffset(b, diverging[1])
    b.Finish(FetchResponse.End(b))
    return bytes(b.Output()), chunk


class Leader:
    """Answers fetches from a list, recording (offset, last_fetched_epoch)
    of each request."""

    def __init__(self, answers: List[Tuple[bytes, bytes]]) -> None:
        self.answers = answers
        self.asked: List[Tuple[int, int]] = []

    def call(self, api: int, header: bytes, payload: bytes = b"") -> Tuple[bytes, bytes]:
        r = FetchRequest.FetchRequest.GetRootAs(header, 0)
        self.asked.append((r.Offset(), r.LastFetchedEpoch()))
        return self.answers.pop(0)


def consumer(leader: Leader) -> Consumer:
    c = Consumer.__new__(Consumer)
    c.conn, c.topic, c._topic, c.partition, c.topic_id = leader, "t", "t", 0, ""
    c.max_bytes, c.max_wait_ms, c.position, c.flushed_offset = 1 << 20, 0, 0, 0
    c.epoch, c._truncations = -1, []
    return c


def test_a_cut_under_the_position_moves_the_consumer_back_and_is_reported():
    first = encode_message(b"a") + encode_message(b"b")  # 10 bytes each
    replaced = encode_message(b"X")
    leader = Leader(
        [
            answer(0, first, 20, chunk_epoch=3),
            # An unclean election: epoch 3 ends at 10 in the new leader's log.
            answer(20, b"", 11, chunk_epoch=-1, diverging=(3, 10)),
            answer(10, replaced, 20, chunk_epoch=4),
        ]
    )
    c = consumer(leader)
    assert [m.value for m in c.poll()] == [b"a", b"b"]
    assert c.epoch == 3
    assert [m.value for m in c.poll()] == [b"X"]
    assert leader.asked == [(0, -1), (20, 3), (10, 3)]
    assert c.take_truncations() == [ringlog.Truncation("t", 0, 10, 20)]
    assert c.take_truncations() == []
    assert (c.position, c.epoch) == (20, 4)


def test_a_cut_reported_twice_in_a_row_is_an_error_and_seek_forgets_the_epoch():
    leader = Leader(
        [
            answer(20, b"", 11, chunk_epoch=-1, diverging=(3, 10)),
            answer(10, b"", 11, chunk_epoch=-1, diverging=(2, 5)),
        ]
    )
    c = consumer(leader)
    c.seek(20, leader_epoch=3)
    with pytest.raises(ringlog.ProtocolError, match="cut under offset 10 twice in a row"):
        c.poll()
    c.seek(40)
    assert c.epoch == -1
