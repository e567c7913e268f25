"""
Turn an uploaded file into document elements, or say precisely why it cannot be processed.

Supported: plain text (``.txt``; form feeds separate pages), Markdown, HTML, CSV/TSV, JSON, XML and
PDFs (their text lines read by pypdf, see :mod:`._pdf`; grouped into paragraphs here). The format comes
from the file name's extension, else from the part's media type.
"""

from __future__ import annotations

import csv
import hashlib
import html
import io
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from airflow_provider_workflowsvc.emulator.schema import Element, ElementMetadata

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.emulator._pdf import PdfLine

__all__ = ["Block", "PartitionError", "element_id", "file_format", "make_elements", "partition"]

_FORMATS_BY_EXTENSION = {
    ".txt": "text",
    ".text": "text",
    ".log": "text",
    ".md": "markdown",
    ".markdown": "markdown",
    ".html": "html",
    ".htm": "html",
    ".csv": "csv",
    ".tsv": "tsv",
    ".json": "json",
    ".xml": "xml",
    ".pdf": "pdf",
}
_MEDIA_TYPES = {
    "text": "text/plain",
    "markdown": "text/markdown",
    "html": "text/html",
    "csv": "text/csv",
    "tsv": "text/tab-separated-values",
    "json": "application/json",
    "xml": "application/xml",
    "pdf": "application/pdf",
}
_FORMATS_BY_MEDIA_TYPE = {
    **{media: fmt for fmt, media in _MEDIA_TYPES.items()},
    "text/x-markdown": "markdown",
    "text/xml": "xml",
    "application/xhtml+xml": "html",
}
_TITLE_MAX_CHARS = 80
_TITLE_MAX_WORDS = 12
_LIST_MARKER = re.compile(r"^\s*(?:[-*+\u2013\u2022\u25cf\u25cb\u25e6\u25aa\u2023]|\d{1,3}[.)])\s+")
# A PDF paragraph goes on while each line follows the last within this many font sizes below it, in
# about the same size (within this fraction), without a list marker or a first-line indent.
_PDF_LINE_PITCH = 1.5
_PDF_SIZE_TOLERANCE = 0.15


class PartitionError(Exception):
    """The file cannot be processed; the message says why (it never quotes the file's content)."""


@dataclass(frozen=True)
class Block:
    """One element before it gets an id: type, text, page and any extra metadata."""

    type: str
    text: str
    page_number: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def file_format(filename: str, media_type: str | None) -> str:
    """Return the format name of a file, from its extension or else its media type."""
    suffix = PurePosixPath(filename).suffix.lower()
    if suffix in _FORMATS_BY_EXTENSION:
        return _FORMATS_BY_EXTENSION[suffix]
    base_type = (media_type or "").split(";")[0].strip().lower()
    if base_type in _FORMATS_BY_MEDIA_TYPE:
        return _FORMATS_BY_MEDIA_TYPE[base_type]
    shown = f"extension {suffix!r}" if suffix else "no extension"
    raise PartitionError(
        f"unsupported file type ({shown}, media type {base_type or 'not given'}); supported: "
        + ", ".join(sorted(_FORMATS_BY_EXTENSION))
    )


def partition(filename: str, media_type: str | None, data: bytes) -> list[dict[str, Any]]:
    """Return the elements of one file as JSON-ready dicts; raise :class:`PartitionError` when it fails."""
    fmt = file_format(filename, media_type)
    if not data:
        raise PartitionError("file is empty (0 bytes)")
    blocks = _pdf_blocks(data) if fmt == "pdf" else list(_TEXT_PARSERS[fmt](_decode(data)))
    if not blocks:
        raise PartitionError(f"no text content found in this {fmt} file")
    return make_elements(filename, _MEDIA_TYPES[fmt], blocks)


def make_elements(
    filename: str, filetype: str, blocks: list[Block], data_source: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Elements (ids, metadata) for the blocks of one document."""
    return [
        Element(
            type=block.type,
            element_id=element_id(filename, index, block),
            text=block.text,
            metadata=ElementMetadata(
                filename=filename,
                filetype=filetype,
                page_number=block.page_number,
                data_source=data_source or None,
                **block.extra,
            ),
        ).model_dump(mode="json", exclude_none=True)
        for index, block in enumerate(blocks)
    ]


def element_id(filename: str, index: int, block: Block) -> str:
    """Return a deterministic id: the same file always gives the same ids."""
    digest = hashlib.sha256(f"{filename}\0{index}\0{block.type}\0{block.text}".encode())
    return digest.hexdigest()[:32]


def _decode(data: bytes) -> str:
    if b"\x00" in data:
        raise PartitionError("file contains binary data (NUL bytes); expected a text document")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise PartitionError(f"file is not valid UTF-8 text (invalid byte at offset {exc.start})") from None
    if not text.strip():
        raise PartitionError("file contains only whitespace; no text content")
    return text


def _pdf_blocks(data: bytes) -> list[Block]:
    try:  # pypdf is imported with the first PDF: the emulator starts without it (about half a second)
        from airflow_provider_workflowsvc.emulator._pdf import PdfError, pdf_pages
    except ModuleNotFoundError as exc:
        if exc.name != "pypdf":
            raise
        raise PartitionError(
            "PDFs need pypdf, which is not installed: pip install 'airflow-provider-workflowsvc[emulator]'"
        ) from None
    try:
        pages = pdf_pages(data)
    except PdfError as exc:
        raise PartitionError(str(exc)) from None
    return [
        _pdf_block(paragraph, page_number)
        for page_number, lines in enumerate(pages, start=1)
        for paragraph in _pdf_paragraphs(lines)
    ]


def _pdf_paragraphs(lines: list[PdfLine]) -> list[str]:
    """Return the text of each paragraph of a page, from its lines in reading order."""
    paragraphs: list[list[PdfLine]] = []
    for line in lines:
        if paragraphs and _continues_paragraph(paragraphs[-1], line):
            paragraphs[-1].append(line)
        else:
            paragraphs.append([line])
    return [" ".join(line.text for line in paragraph) for paragraph in paragraphs]


def _continues_paragraph(paragraph: list[PdfLine], line: PdfLine) -> bool:
    last = paragraph[-1]
    return (
        0 < last.y - line.y <= _PDF_LINE_PITCH * last.size
        and abs(line.size - last.size) <= _PDF_SIZE_TOLERANCE * last.size
        and not _LIST_MARKER.match(line.text)
        # a list item's wrapped lines are indented past its marker; elsewhere an indent starts a paragraph
        and (line.x <= last.x + last.size or bool(_LIST_MARKER.match(paragraph[0].text)))
    )


def _pdf_block(text: str, page_number: int) -> Block:
    if _LIST_MARKER.match(text):
        return Block("ListItem", _LIST_MARKER.sub("", text, count=1), page_number)
    return Block(_classify(text), text, page_number)


# --------------------------------------------------------------------------------------------------
# Text-like formats


def _looks_like_title(line: str) -> bool:
    return (
        len(line) <= _TITLE_MAX_CHARS
        and len(line.split()) <= _TITLE_MAX_WORDS
        and line[-1] not in ".!?:;,"
        and any(ch.isalpha() for ch in line)
    )


def _classify(text: str) -> str:
    return "Title" if _looks_like_title(text) else "NarrativeText"


def _paragraph_blocks(paragraph: str, page: int | None) -> Iterator[Block]:
    lines = [line.strip() for line in paragraph.splitlines() if line.strip()]
    if not lines:
        return
    if all(_LIST_MARKER.match(line) for line in lines):
        for line in lines:
            yield Block("ListItem", _LIST_MARKER.sub("", line, count=1), page)
    elif len(lines) == 1:
        yield Block(_classify(lines[0]), lines[0], page)
    else:
        yield Block("NarrativeText", " ".join(lines), page)


def _text_blocks(text: str) -> Iterator[Block]:
    for page_number, page in enumerate(text.split("\f"), start=1):
        for paragraph in re.split(r"\n\s*\n", page):
            yield from _paragraph_blocks(paragraph, page_number)


def _table_html(rows: list[list[str]]) -> str:
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in rows
    )
    return f"<table>{body}</table>"


def _table_block(rows: list[list[str]]) -> Block | None:
    rows = [[cell.strip() for cell in row] for row in rows if any(cell.strip() for cell in row)]
    if not rows:
        return None
    text = "\n".join(" ".join(cell for cell in row if cell) for row in rows)
    return Block("Table", text, extra={"text_as_html": _table_html(rows)})


def _markdown_blocks(text: str) -> Iterator[Block]:
    paragraph: list[str] = []
    table: list[list[str]] = []
    code: list[str] | None = None

    def flush() -> Iterator[Block]:
        if paragraph:
            yield from _paragraph_blocks("\n".join(paragraph), None)
            paragraph.clear()
        if table and (block := _table_block(table)) is not None:
            yield block
        table.clear()

    for line in text.splitlines():
        stripped = line.strip()
        if code is not None:
            if stripped.startswith("```"):
                if "".join(code).strip():
                    yield Block("CodeSnippet", "\n".join(code))
                code = None
            else:
                code.append(line)
        elif stripped.startswith("```"):
            yield from flush()
            code = []
        elif re.match(r"^#{1,6}\s+\S", stripped):
            yield from flush()
            yield Block("Title", stripped.lstrip("#").strip())
        elif stripped.startswith("|"):
            if paragraph:
                yield from flush()
            if not re.fullmatch(r"\|?[\s:|-]+\|?", stripped):
                table.append(stripped.strip("|").split("|"))
        elif not stripped:
            yield from flush()
        else:
            if table:
                yield from flush()
            paragraph.append(stripped)
    yield from flush()


class _HtmlBlocks(HTMLParser):
    """Collect headings, paragraphs, list items, code and tables from HTML."""

    _KINDS = {
        **{f"h{level}": "Title" for level in range(1, 7)},
        "li": "ListItem",
        "pre": "CodeSnippet",
        "p": "NarrativeText",
        "blockquote": "NarrativeText",
    }
    _BREAKS = frozenset({"div", "section", "article", "header", "footer", "main", "br", "body", "ul", "ol"})
    _SKIP = frozenset({"script", "style", "head", "title", "template", "noscript"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[Block] = []
        self._text: list[str] = []
        self._kind: str | None = None
        self._skip = 0
        self._rows: list[list[str]] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._SKIP:
            self._skip += 1
        elif tag == "table":
            self._flush()
            self._rows = []
        elif self._rows is not None:
            if tag == "tr":
                self._rows.append([])
            elif tag in ("td", "th"):
                self._cell = []
        elif tag in self._KINDS or tag in self._BREAKS:
            self._flush()
            self._kind = self._KINDS.get(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIP:
            self._skip = max(0, self._skip - 1)
        elif tag == "table" and self._rows is not None:
            if (block := _table_block(self._rows)) is not None:
                self.blocks.append(block)
            self._rows = None
        elif self._rows is not None:
            if tag in ("td", "th") and self._cell is not None:
                if not self._rows:
                    self._rows.append([])
                self._rows[-1].append(" ".join("".join(self._cell).split()))
                self._cell = None
        elif tag in self._KINDS or tag in self._BREAKS:
            self._flush()

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        if self._cell is not None:
            self._cell.append(data)
        elif self._rows is None:
            self._text.append(data)

    def _flush(self) -> None:
        raw = "".join(self._text)
        self._text.clear()
        kind, self._kind = self._kind, None
        if kind == "CodeSnippet":
            if raw.strip():
                self.blocks.append(Block(kind, raw.strip("\n")))
            return
        text = " ".join(raw.split())
        if text:
            self.blocks.append(Block(kind or _classify(text), text))

    def close(self) -> None:
        super().close()
        self._flush()


def _html_blocks(text: str) -> Iterator[Block]:
    parser = _HtmlBlocks()
    parser.feed(text)
    parser.close()
    return iter(parser.blocks)


def _delimited_blocks(text: str, delimiter: str) -> Iterator[Block]:
    try:
        rows = list(csv.reader(io.StringIO(text), delimiter=delimiter, strict=True))
    except csv.Error as exc:
        raise PartitionError(f"malformed delimited text: {exc}") from None
    block = _table_block(rows)
    if block is not None:
        yield block


_TITLE_KEYS = frozenset({"title", "heading", "name", "subject", "header"})


def _json_blocks(text: str) -> Iterator[Block]:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PartitionError(f"invalid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    yield from _json_leaves(document, "")


def _json_leaves(value: Any, path: str) -> Iterator[Block]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _json_leaves(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _json_leaves(item, f"{path}[{index}]")
    elif isinstance(value, str):
        if value.strip():
            key = path.rsplit(".", 1)[-1].split("[", 1)[0].lower()
            yield Block("Title" if key in _TITLE_KEYS else "NarrativeText", value.strip())
    elif value is not None:
        yield Block("NarrativeText", f"{path}: {json.dumps(value)}")


_XML_TITLE_TAGS = frozenset({"title", "heading", "head", "h1", "h2", "h3", "subject", "name"})


def _xml_blocks(text: str) -> Iterator[Block]:
    if "<!ENTITY" in text:
        raise PartitionError("XML with entity declarations is not supported")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise PartitionError(f"invalid XML: {exc}") from None
    for node in root.iter():
        tag = str(node.tag).rsplit("}", 1)[-1].lower()
        own = " ".join((node.text or "").split())
        if own:
            yield Block("Title" if tag in _XML_TITLE_TAGS else "NarrativeText", own)
        tail = " ".join((node.tail or "").split()) if node is not root else ""
        if tail:
            yield Block("NarrativeText", tail)


_TEXT_PARSERS: dict[str, Callable[[str], Iterator[Block]]] = {
    "text": _text_blocks,
    "markdown": _markdown_blocks,
    "html": _html_blocks,
    "csv": lambda text: _delimited_blocks(text, ","),
    "tsv": lambda text: _delimited_blocks(text, "\t"),
    "json": _json_blocks,
    "xml": _xml_blocks,
}
