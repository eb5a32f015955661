"""scapy layers for what this project adds to RoCEv2 on the wire (scapy.contrib.roce has the rest).

Importing this module binds them: `BTH(opcode=0xD1)` is followed by an AETH and a SACKETH, so
scapy decodes the selective acknowledgement (docs/multipath.md, "The SACK on the wire") and
computes its ICRC like any BTH packet's.
"""

from __future__ import annotations

from typing import Any, ClassVar

from scapy.contrib.roce import AETH, BTH
from scapy.fields import FieldLenField, FieldListField, X3BytesField, XLongField
from scapy.packet import Packet, bind_layers

from emulator.transport.packets import Opcode

_ONE_WORD: Any = [0]  # scapy's stubs type a list field's default as its fields, not values


class SACKETH(Packet):
    """The selective acknowledgement's extended header: how many 64-bit bitmap words follow,
    the PSN bit 0 of word 0 stands for, and the words (bit j of word w: PSN base + 64w + j)."""

    name = "SACKETH"
    fields_desc: ClassVar[list[Any]] = [
        FieldLenField("words", None, fmt="B", count_of="bitmap"),
        X3BytesField("base_psn", 0),
        FieldListField("bitmap", _ONE_WORD, XLongField("", 0), count_from=lambda p: p.words),
    ]

    def held_psns(self) -> list[int]:
        """The PSNs the bitmap says are held, ascending."""
        base = int(self.base_psn)
        out = []
        for w, word in enumerate(self.bitmap):
            for j in range(64):
                if word >> j & 1:
                    out.append((base + 64 * w + j) & 0xFFFFFF)
        return out


bind_layers(BTH, AETH, opcode=int(Opcode.SELECTIVE_ACKNOWLEDGE))
bind_layers(AETH, SACKETH)
