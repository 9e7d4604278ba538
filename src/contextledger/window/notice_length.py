"""The drop notice's length, computed without writing it, for one notice or arrays of them.

The kernel prices a notice at every visit of every (policy, run) and never writes one:
its length is the text's fixed part plus what varies (the counts' digits, the strategy,
the names printed), in JavaScript's UTF-16 units, as :func:`drop_notice_text` writes it.
"""

from __future__ import annotations

import numpy as np

from contextledger.read.jsjson import utf16_length
from contextledger.window.notice import drop_notice_text

#: The notice's fixed text; then what a kept span, printed names and ``, …`` add.
PLAIN_FIXED = utf16_length(drop_notice_text(0, 0, "")) - 2
KEPT_EXTRA = utf16_length(drop_notice_text(0, 0, "", True)) - utf16_length(
    drop_notice_text(0, 0, "")
)
NAMES_EXTRA = utf16_length(drop_notice_text(0, 0, "", tool_names=["a"])) - (PLAIN_FIXED + 2) - 1
ELLIPSIS_EXTRA = len(", …")
_POWERS_OF_TEN = np.array([10**n for n in range(1, 19)], dtype=np.int64)


def drop_notice_length(
    dropped_message_count: int, iteration: int, strategy_chars: int, kept: bool, wire_chars: int
) -> int:
    """Length of ``drop_notice_text`` without writing it (``wire_chars``: the names printed).

    >>> text = drop_notice_text(12, 7, "sliding-window", True, ["look", "probe"])
    >>> drop_notice_length(12, 7, len("sliding-window"), True, len("look, probe")) == len(text)
    True
    """
    names = NAMES_EXTRA + wire_chars if wire_chars else 0
    return (
        PLAIN_FIXED
        + len(str(dropped_message_count))
        + len(str(iteration))
        + strategy_chars
        + (KEPT_EXTRA if kept else 0)
        + names
    )


def digits(values: np.ndarray) -> np.ndarray:
    """Decimal digits of non-negative integers (``len(str(v))``)."""
    return np.searchsorted(_POWERS_OF_TEN, values, side="right") + 1
