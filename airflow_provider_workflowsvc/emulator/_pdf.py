"""
Text of simple PDFs: each content stream (uncompressed or FlateDecode) in file order is a page.

Enough for PDFs written by ordinary generators with standard fonts: text shown with ``Tj``, ``TJ``,
``'`` and ``"`` inside ``BT``/``ET``. Encrypted PDFs, other stream filters and CID-keyed fonts are not
supported (their text is not extracted).
"""

from __future__ import annotations

import re
import zlib

__all__ = ["MAX_CONTENT_BYTES", "MAX_PAGES", "MAX_STREAM_BYTES", "PdfError", "pdf_pages"]

MAX_STREAM_BYTES = 16 * 1024 * 1024
"""The most one content stream may decompress to (a Flate bomb stops here, not at gigabytes)."""
MAX_CONTENT_BYTES = 64 * 1024 * 1024
"""The most all content streams of one PDF may decompress to together."""
MAX_PAGES = 2_000
"""The most content streams (pages) read from one PDF."""

_HEADER_WINDOW = 1024
_STREAM = re.compile(rb"obj\s*<<(.*?)>>\s*stream\r?\n", re.S)
_LENGTH = re.compile(rb"/Length\s+(\d+)(?!\s+\d+\s+R)")
_DELIMITERS = b"()<>[]{}/%"
_WHITESPACE = b" \t\r\n\f\x00"
_ESCAPES = {ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t", ord("b"): b"\b", ord("f"): b"\f"}
_TJ_SPACE = -200
_NEW_LINE_OPS = frozenset({b"T*", b"Tm", b"'", b'"'})


class PdfError(Exception):
    """The PDF cannot be read; the message says why."""


def pdf_pages(data: bytes) -> list[list[str]]:
    """Return the text lines of each page; raise :class:`PdfError` when there is no text to extract."""
    if b"%PDF-" not in data[:_HEADER_WINDOW]:
        raise PdfError("not a PDF: the %PDF- header is missing")
    if b"/Encrypt" in data:
        raise PdfError("encrypted PDFs are not supported")
    pages = [lines for content in _content_streams(data) if (lines := _text_lines(content)) is not None]
    if not any(pages):
        raise PdfError(
            "no extractable text in this PDF (scanned images, or fonts/filters the emulator does not read)"
        )
    return pages


def _content_streams(data: bytes) -> list[bytes]:
    streams: list[bytes] = []
    budget = MAX_CONTENT_BYTES
    for match in _STREAM.finditer(data):
        dictionary, start = match.group(1), match.end()
        if b"/Subtype" in dictionary and b"/Image" in dictionary:
            continue
        length = _LENGTH.search(dictionary)
        end = start + int(length.group(1)) if length else data.find(b"endstream", start)
        if end < start:
            raise PdfError("corrupt PDF: a stream has no end")
        raw = data[start:end]
        if b"/Filter" not in dictionary:
            content = raw
        elif b"/FlateDecode" in dictionary:
            content = _inflate(raw, min(MAX_STREAM_BYTES, budget))
        else:
            continue
        if len(streams) == MAX_PAGES:
            raise PdfError(f"PDF has too many pages: the emulator reads at most {MAX_PAGES}")
        budget -= len(content)
        streams.append(content)
    return streams


def _inflate(raw: bytes, limit: int) -> bytes:
    """``raw`` decompressed, refusing to produce more than ``limit`` bytes."""
    try:
        content = zlib.decompressobj().decompress(raw, max(limit, 0) + 1)  # one byte more shows excess
    except zlib.error:
        raise PdfError("corrupt PDF: a compressed content stream cannot be decompressed") from None
    if len(content) > limit:
        raise PdfError(
            "PDF content too large: its compressed streams expand beyond the emulator's limits "
            f"({MAX_STREAM_BYTES // (1024 * 1024)} MiB per stream, {MAX_CONTENT_BYTES // (1024 * 1024)} MiB "
            "per file)"
        )
    return content


def _text_lines(content: bytes) -> list[str] | None:
    """Return the lines of text a content stream shows, or None when it shows none (not a page)."""
    if b"BT" not in content:
        return None
    lines: list[str] = []
    current: list[str] = []
    operands: list[object] = []
    for token in _tokens(content):
        if not isinstance(token, _Operator):
            operands.append(token)
            continue
        if token in _NEW_LINE_OPS or (token in (b"Td", b"TD") and _moves_down(operands)) or token == b"ET":
            _end_line(current, lines)
        if token in (b"Tj", b"'", b'"') and operands and isinstance(operands[-1], bytes):
            current.append(_decode_text(operands[-1]))
        elif token == b"TJ" and operands and isinstance(operands[-1], list):
            current.append(_decode_array(operands[-1]))
        operands.clear()
    _end_line(current, lines)
    return lines


def _moves_down(operands: list[object]) -> bool:
    return len(operands) >= 2 and isinstance(operands[-1], float) and operands[-1] != 0


def _end_line(current: list[str], lines: list[str]) -> None:
    text = " ".join("".join(current).split())
    if text and sum(ch.isprintable() for ch in text) >= 0.9 * len(text):
        lines.append(text)
    current.clear()


def _decode_text(raw: bytes) -> str:
    if raw.startswith(b"\xfe\xff"):
        return raw[2:].decode("utf-16-be", errors="replace")
    return raw.decode("latin-1")


def _decode_array(items: list[object]) -> str:
    parts = []
    for item in items:
        if isinstance(item, bytes):
            parts.append(_decode_text(item))
        elif isinstance(item, float) and item < _TJ_SPACE:
            parts.append(" ")
    return "".join(parts)


class _Operator(bytes):
    """A content-stream operator (``Tj``, ``BT``, ...)."""


def _tokens(content: bytes) -> list[object]:
    """Operands (strings as bytes, numbers as float, arrays as lists, names) and operators."""
    tokens: list[object] = []
    stack: list[list[object]] = [tokens]
    i, size = 0, len(content)
    while i < size:
        ch = content[i]
        if ch in _WHITESPACE:
            i += 1
        elif ch == ord("%"):
            while i < size and content[i] not in b"\r\n":
                i += 1
        elif ch == ord("("):
            value, i = _literal_string(content, i + 1)
            stack[-1].append(value)
        elif ch == ord("<") and content[i + 1 : i + 2] != b"<":
            end = content.find(b">", i)
            end = size if end < 0 else end
            stack[-1].append(_hex_string(content[i + 1 : end]))
            i = end + 1
        elif ch == ord("["):
            stack.append([])
            i += 1
        elif ch == ord("]"):
            if len(stack) > 1:
                array = stack.pop()
                stack[-1].append(array)
            i += 1
        else:
            start = i
            i += 1
            while i < size and content[i] not in _WHITESPACE and content[i] not in _DELIMITERS:
                i += 1
            stack[-1].append(_word(content[start:i]))
    return tokens


def _word(word: bytes) -> object:
    if word.startswith(b"/") or word in (b"<<", b">>"):
        return ("name", word)
    try:
        return float(word)
    except ValueError:
        return _Operator(word)


def _literal_string(content: bytes, i: int) -> tuple[bytes, int]:
    out = bytearray()
    depth, size = 1, len(content)
    while i < size:
        ch = content[i]
        if ch == ord("\\") and i + 1 < size:
            nxt = content[i + 1]
            if nxt in _ESCAPES:
                out += _ESCAPES[nxt]
                i += 2
            elif ord("0") <= nxt <= ord("7"):
                digits = re.match(rb"[0-7]{1,3}", content[i + 1 : i + 4])
                assert digits is not None
                out.append(int(digits.group(), 8) & 0xFF)
                i += 1 + len(digits.group())
            elif nxt in b"\r\n":
                i += 2
            else:
                out.append(nxt)
                i += 2
            continue
        if ch == ord("("):
            depth += 1
        elif ch == ord(")"):
            depth -= 1
            if depth == 0:
                return bytes(out), i + 1
        out.append(ch)
        i += 1
    return bytes(out), i


def _hex_string(raw: bytes) -> bytes:
    digits = bytes(b for b in raw if b not in _WHITESPACE)
    if len(digits) % 2:
        digits += b"0"
    try:
        return bytes.fromhex(digits.decode("ascii"))
    except ValueError:
        return b""
