"""Sample input files for tests, demos and benchmarks: text-like documents and minimal PDFs."""

from __future__ import annotations

import zlib
from pathlib import Path

__all__ = ["pdf_document", "simple_pdf", "write_sample_files"]


_FONT = "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"


def _pdf_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def simple_pdf(pages: list[list[str]], *, compress: bool = False) -> bytes:
    """Return a valid minimal PDF (Helvetica text, one line per entry) with the given lines on each page."""
    objects: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>", b""]
    kids = []
    for lines in pages:
        ops = ["BT /F1 12 Tf 72 720 Td"] + [f"({_pdf_escape(line)}) Tj 0 -16 Td" for line in lines] + ["ET"]
        content = "\n".join(ops).encode("latin-1")
        filters = b""
        if compress:
            content, filters = zlib.compress(content), b" /Filter /FlateDecode"
        page_number = len(objects) + 1
        kids.append(f"{page_number} 0 R")
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {page_number + 1} 0 R "
            f"/Resources << /Font << /F1 {_FONT} >> >> >>".encode()
        )
        objects.append(b"<< /Length %d%s >>\nstream\n" % (len(content), filters) + content + b"\nendstream")
    objects[1] = f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {len(kids)} >>".encode()
    return pdf_document(objects)


def pdf_document(objects: list[bytes]) -> bytes:
    """Return a PDF of these object bodies (object 1 the catalog) with its cross-reference table."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


_SAMPLE_TEXT = (
    "Quarterly Report {n}\n\n"
    "This document is sample number {n}. It has a title, a paragraph and a short list.\n\n"
    "- first point of document {n}\n- second point of document {n}\n"
)


def write_sample_files(directory: str | Path, count: int, suffix: str = ".txt") -> list[Path]:
    """Write ``count`` small documents (``.txt``, ``.md``, ``.html`` or ``.pdf``) into ``directory``."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for n in range(1, count + 1):
        path = folder / f"sample-{n:04d}{suffix}"
        text = _SAMPLE_TEXT.format(n=n)
        if suffix == ".pdf":
            path.write_bytes(simple_pdf([[line for line in text.splitlines() if line]]))
        elif suffix in (".html", ".htm"):
            path.write_text(f"<html><body><h1>Report {n}</h1><p>Sample paragraph {n}.</p></body></html>")
        else:
            path.write_text(text)
        paths.append(path)
    return paths
