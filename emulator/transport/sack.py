"""The requester's scoreboard for selective repeat: what the responder holds, what is lost.

Sequence numbers are the sender's (PSN offsets from the initial PSN, not wrapped). `held` is a
bitmap relative to the oldest unacknowledged packet (`una`): bit i set = the responder holds
una + i (a SACK said so). A hole is lost once `allowance` held packets lie above it: RFC 6675
section 4 (IsLost: DupThresh SACKed segments above it), with the threshold in packets, since
sprayed packets arrive out of order by several without any loss. Each hole is declared lost
once (`declared_to`); a resend that is lost again is recovered by the retransmission timeout,
which declares every packet not held lost (RFC 6675 section 5.1).
"""

from __future__ import annotations

from collections import deque


class Scoreboard:
    __slots__ = ("_queue", "allowance", "declared_to", "held")

    def __init__(self, allowance: int) -> None:
        if allowance < 1:
            raise ValueError("reorder_allowance_packets: must be at least 1")
        self.allowance = allowance
        self.held = 0
        self.declared_to = 0  # holes below this sequence number were declared lost already
        self._queue: deque[int] = deque()  # lost sequence numbers to send again, ascending

    def advance(self, count: int) -> None:
        """The cumulative acknowledgement moved `count` packets on."""
        self.held >>= count

    def on_sack(self, una: int, next_seq: int, base_seq: int, bitmap: int) -> list[int]:
        """A SACK: the responder holds base_seq + i for each bit i of `bitmap` (only what was
        sent and is unacknowledged counts). Returns the sequence numbers newly found lost."""
        shift = base_seq - una
        bits = bitmap << shift if shift >= 0 else bitmap >> -shift
        self.held |= bits & ((1 << (next_seq - una)) - 1)
        return self._detect(una)

    def _detect(self, una: int) -> list[int]:
        held = self.held
        if held.bit_count() < self.allowance:
            return []
        # the allowance-th highest held packet: every hole below it is lost
        top = held
        for _ in range(self.allowance - 1):
            top &= ~(1 << (top.bit_length() - 1))
        limit = top.bit_length() - 1
        start = max(self.declared_to - una, 0)
        lost = [una + i for i in range(start, limit) if not held >> i & 1]
        if una + limit > self.declared_to:
            self.declared_to = una + limit
        self._queue.extend(lost)
        return lost

    def all_lost(self, una: int, next_seq: int) -> int:
        """A timeout: every unacknowledged packet not held is sent again. Returns how many."""
        held = self.held
        self._queue = deque(s for s in range(una, next_seq) if not held >> (s - una) & 1)
        self.declared_to = next_seq
        return len(self._queue)

    def lost(self, seq: int) -> None:
        """One packet known lost (a NAK names it)."""
        if seq not in self._queue:
            self._queue.appendleft(seq)

    def resend_pending(self, una: int) -> bool:
        """Whether a lost packet still waits to be sent again (acknowledged or held ones are
        dropped from the queue as they come up)."""
        queue = self._queue
        held = self.held
        while queue:
            seq = queue[0]
            if seq >= una and not held >> (seq - una) & 1:
                return True
            queue.popleft()
        return False

    def next_resend(self) -> int:
        """The next sequence number to send again (after resend_pending said there is one)."""
        return self._queue[0]

    def run_length(self, una: int, limit: int) -> int:
        """How many of the queue's first entries are consecutive sequence numbers none of which
        is held (at most `limit`): they can leave as one burst."""
        queue = self._queue
        held = self.held
        first = queue[0]
        n = 1
        while (
            n < limit
            and n < len(queue)
            and queue[n] == first + n
            and not held >> (first + n - una) & 1
        ):
            n += 1
        return n

    def take(self, count: int) -> None:
        for _ in range(count):
            self._queue.popleft()
