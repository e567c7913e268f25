"""The text lines of each page of a PDF, read by pypdf within the emulator's bounds on size and decoding."""

from __future__ import annotations

import io
import itertools
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pypdf
from pypdf.errors import LimitReachedError
from pypdf.generic import EncodedStreamObject

__all__ = ["MAX_CONTENT_BYTES", "MAX_PAGES", "MAX_STREAM_BYTES", "PdfError", "PdfLine", "pdf_pages"]

MAX_STREAM_BYTES = 16 * 1024 * 1024
"""The most one stream may decompress to (a Flate bomb stops here, not at gigabytes)."""
MAX_CONTENT_BYTES = 64 * 1024 * 1024
"""The most all decompressed streams of one PDF may hold together."""
MAX_PAGES = 2_000
"""The most pages read from one PDF."""

_HEADER_WINDOW = 1024
# A piece of text this close to a line's baseline (in font sizes) is on that line: superscripts stay.
_SAME_BASELINE = 0.5
# Control characters (Unicode category Cc) go: a glyph without Unicode comes out as one; line breaks and
# tabs become spaces (a line's words are spaced once, at the end).
_CONTROLS = {code: None for code in [*range(0x20), *range(0x7F, 0xA0)]} | {ord(ch): " " for ch in "\t\n\r"}


class PdfError(Exception):
    """The PDF cannot be read; the message says why (it never quotes the file's content)."""


@dataclass
class PdfLine:
    """One line of text on a page: its text, where it starts (PDF points, y upwards) and its font size."""

    text: str
    x: float
    y: float
    size: float


def pdf_pages(data: bytes) -> list[list[PdfLine]]:
    """Return the text lines of each page, in reading order; raise :class:`PdfError` when there is no text."""
    if b"%PDF-" not in data[:_HEADER_WINDOW]:
        raise PdfError("not a PDF: the %PDF- header is missing")
    with _reading_limits(), _failures_explained():
        reader = pypdf.PdfReader(io.BytesIO(data))  # an encrypted PDF: opened with the empty password
        if reader.is_encrypted and reader.decrypt("") == pypdf.PasswordType.NOT_DECRYPTED:
            raise PdfError("encrypted PDF: it needs a password to open (decrypt it first)")
        if len(reader.pages) > MAX_PAGES:
            raise PdfError(f"PDF has too many pages: the emulator reads at most {MAX_PAGES}")
        decoded, pages = _DecodedBytes(reader), []
        for page in reader.pages:
            pages.append(_page_lines(page))
            if decoded.count() > MAX_CONTENT_BYTES:
                raise PdfError(
                    f"PDF content too large: its streams decode to more than {_mib(MAX_CONTENT_BYTES)} MiB "
                    "together (the emulator's limit per file)"
                )
        if not any(pages):
            raise PdfError(_no_text_reason(reader))
    return pages


@contextmanager
def _reading_limits() -> Iterator[None]:
    """Stop pypdf's decoders at MAX_STREAM_BYTES, in this context only; run no external decoder."""
    with pypdf.apply_configuration(
        zlib_maximum_output_length=MAX_STREAM_BYTES,
        lzw_maximum_output_length=MAX_STREAM_BYTES,
        run_length_maximum_output_length=MAX_STREAM_BYTES,
        array_based_stream_maximum_output_length=MAX_STREAM_BYTES,
        jbig2_maximum_output_length=MAX_STREAM_BYTES,
        image_maximum_buffer_size=MAX_STREAM_BYTES,
        jbig2dec_binary=None,
    ):
        yield


@contextmanager
def _failures_explained() -> Iterator[None]:
    """Turn pypdf's errors into a :class:`PdfError` that names the kind of failure, never the content."""
    try:
        yield
    except PdfError:
        raise
    except LimitReachedError:
        raise PdfError(
            "PDF content too large or too complex: reading it reached a limit (the emulator's "
            f"{_mib(MAX_STREAM_BYTES)} MiB per decoded stream, or one of pypdf's on a PDF's structure)"
        ) from None
    except Exception as exc:  # pypdf raises many types on malformed input; each is a failed file here
        raise PdfError(f"corrupt PDF: pypdf cannot read it ({type(exc).__name__})") from None


def _mib(size: int) -> int:
    return size // (1024 * 1024)


class _DecodedBytes:
    """
    The bytes of the streams pypdf has decoded for one reader (it keeps each with its object).

    Each stream is counted once: :meth:`count` looks only at the objects read since its last call and
    at the streams that were not decoded yet, so counting after every page stays linear in the file.
    """

    def __init__(self, reader: pypdf.PdfReader) -> None:
        self._objects = reader.resolved_objects
        self._seen = 0
        self._waiting: list[EncodedStreamObject] = []
        self._total = 0

    def count(self) -> int:
        fresh = itertools.islice(self._objects.values(), self._seen, None)
        self._seen = len(self._objects)
        streams = [*self._waiting, *(obj for obj in fresh if isinstance(obj, EncodedStreamObject))]
        self._waiting = [stream for stream in streams if stream.decoded_self is None]
        self._total += sum(len(s.decoded_self.get_data()) for s in streams if s.decoded_self is not None)
        return self._total


def _no_text_reason(reader: pypdf.PdfReader) -> str:
    pages = len(reader.pages)
    if any(len(page.images) for page in reader.pages):
        return (
            f"image-only PDF: its {pages} page(s) hold images but no text layer (a scan?); "
            "the emulator does no OCR"
        )
    return f"no extractable text in this PDF: its {pages} page(s) show no text"


def _page_lines(page: pypdf.PageObject) -> list[PdfLine]:
    """
    Return the page's lines in content order: pypdf's pieces of text, those on one baseline joined.

    pypdf decodes the text (fonts, encodings, ToUnicode maps) and spaces the words within a piece; it
    also breaks lines between pieces drawn one text object each (as some writers draw each word), so
    the pieces are joined again here by their baseline, with a space where pypdf saw a break.
    """
    lines: list[PdfLine] = []
    apart = False

    def visit(text: str, cm: list[float], tm: list[float], _font: object, font_size: float) -> None:
        nonlocal apart
        if not text:
            return
        shown = text.translate(_CONTROLS)
        if shown.strip():
            x, y, size = _placement(cm, tm, font_size)
            last = lines[-1] if lines else None
            if last is not None and abs(y - last.y) <= _SAME_BASELINE * max(size, last.size):
                last.text += (" " if apart else "") + shown
                if size > last.size:  # a line's baseline is that of its largest text, not a superscript's
                    last.y, last.size = y, size
            else:
                lines.append(PdfLine(shown, x, y, size))
        apart = text.endswith("\n") or not shown.strip()

    page.extract_text(visitor_text=visit)
    for line in lines:
        line.text = " ".join(line.text.split())
    return [line for line in lines if line.text]


def _placement(cm: list[float], tm: list[float], font_size: float) -> tuple[float, float, float]:
    """Where a piece of text starts on the page (x, y in points) and its rendered font size."""
    x = tm[4] * cm[0] + tm[5] * cm[2] + cm[4]
    y = tm[4] * cm[1] + tm[5] * cm[3] + cm[5]
    scale = math.hypot(tm[2] * cm[0] + tm[3] * cm[2], tm[2] * cm[1] + tm[3] * cm[3])
    return x, y, font_size * scale
