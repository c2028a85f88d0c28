"""What the CLI prints is text, never terminal commands: names from an artifact or a model are data.

A tensor name in a manifest or model file can hold escape sequences (``\\x1b]0;...`` retitles the
terminal, ``\\x1b[2J`` clears it), NUL, bidirectional overrides that make text read backwards, or a
lone surrogate that makes ``print`` raise ``UnicodeEncodeError``. :func:`safe_text` shows each as a
visible escape (``\\x1b``, ``\\u202e``, ``\\udc80``); :class:`SafeStream` applies it to everything
the CLI writes (``edge_sdk.cli.main`` wraps stdout and stderr), so no command has to remember to.
A carriage return is kept only where a line starts with it (the progress bars redraw that way).
"""

from __future__ import annotations

import re
from typing import Any, TextIO

#: C0/C1 controls but tab and newline, DEL, bidi embeddings/overrides/isolates, lone surrogates.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def safe_text(text: str) -> str:
    """``text`` with every character that could act on a terminal shown as an escape."""
    if text.startswith("\r"):
        return "\r" + _UNSAFE.sub(_escape, text[1:])
    return _UNSAFE.sub(_escape, text)


class SafeStream:
    """A text stream that writes :func:`safe_text` of everything to ``raw`` (attributes pass through)."""

    def __init__(self, raw: TextIO) -> None:
        self._raw = raw

    def write(self, text: str) -> int:
        if not isinstance(text, str):  # pragma: no cover - click writes bytes to .buffer, not here
            return self._raw.write(text)
        text = safe_text(text)
        try:
            return self._raw.write(text)
        except UnicodeEncodeError:  # a terminal that cannot show the character (LANG=C): escape it
            enc = getattr(self._raw, "encoding", None) or "ascii"
            return self._raw.write(text.encode(enc, "backslashreplace").decode(enc))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


__all__ = ["SafeStream", "safe_text"]
