"""
PDFs written at test time, in the shapes real writers give them (no PDF is committed).

* :func:`paper_pdf`: two pages typeset like a paper (title, abstract, a numbered list) in an embedded
  TrueType font, whose words use the ligature glyphs (U+FB01 "ﬁ" and kin) that the font's ToUnicode map
  names, as a LaTeX paper's do.
* :func:`list_items_pdf`: one page in the shape of the public SDK's ``list-item-example-1.pdf`` (an
  office suite's export): a CID-keyed (Type0, Identity-H) font, so every glyph is a two-byte code that
  only the ToUnicode map turns into text, and each word drawn in a text object of its own; a heading,
  a paragraph and bulleted items whose long lines wrap under the item's text.
* :func:`pages_pdf`, :func:`stream`: PDFs from raw objects (page trees and streams fpdf2 does not write).

The font is built here with fontTools (which fpdf2 brings): boxes for glyphs, the text is what counts.
"""

from __future__ import annotations

import io
import string
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

from fontTools.fontBuilder import FontBuilder
from fontTools.pens.ttGlyphPen import TTGlyphPen
from fpdf import FPDF

from airflow_provider_workflowsvc.emulator.samples import pdf_document

LIGATURES = "\ufb00\ufb01\ufb02\ufb03\ufb04"  # ﬀ ﬁ ﬂ ﬃ ﬄ
BULLET = "\u25cf"  # ●

PAPER_TITLE = ("Workﬂow Emulators: A Uniﬁed Toolkit for", "Reading Documents in Tests")
PAPER_SENTENCE_PAGE_1 = (
    "The emulator reads the ﬁles a user uploads and returns their text as elements, so that a pipeline "
    "can be tested oﬄine before it meets the real service."
)
PAPER_SENTENCE_PAGE_2 = "Each element names the page it was found on, as the service's elements do."
PAPER_ITEMS = (
    "A reader that keeps every glyph, ligatures included, as the ﬁle's fonts deﬁne them.",
    "Bounds on size and decompression, so that a hostile ﬁle fails fast and eﬀortlessly.",
)

LIST_HEADING = "Module One - Planning the Pipeline"
LIST_PARAGRAPH = (
    "This module introduces the stages of a document pipeline and the questions a team answers "
    "before its ﬁrst run."
)
LIST_ITEMS = (
    "Which sources hold the documents?",
    "How often must the pipeline run, and who is told when it fails?",
    "Where do the elements go?",
    "What does a good result look like for the people who search the documents afterwards?",
)


@cache
def sample_font() -> bytes:
    """A TrueType font with ASCII, the Latin ligatures and a bullet (every glyph a box, 500 units wide)."""
    characters = string.ascii_letters + string.digits + string.punctuation + LIGATURES + BULLET
    names = {ch: f"uni{ord(ch):04X}" for ch in characters}
    order = [".notdef", "space", *names.values()]
    builder = FontBuilder(1000, isTTF=True)
    builder.setupGlyphOrder(order)
    builder.setupCharacterMap({ord(" "): "space", **{ord(ch): name for ch, name in names.items()}})
    builder.setupGlyf({name: _box() if name != "space" else TTGlyphPen(None).glyph() for name in order})
    builder.setupHorizontalMetrics({name: (250 if name == "space" else 500, 0) for name in order})
    builder.setupHorizontalHeader(ascent=800, descent=-200)
    builder.setupNameTable({"familyName": "EmulatorTest", "styleName": "Regular"})
    builder.setupOS2(sTypoAscender=800, sTypoDescender=-200, usWinAscent=800, usWinDescent=200)
    builder.setupPost()
    out = io.BytesIO()
    builder.save(out)
    return out.getvalue()


def _box() -> object:
    pen = TTGlyphPen(None)
    for point in ((50, 0), (50, 700), (450, 700), (450, 0)):
        (pen.lineTo if point != (50, 0) else pen.moveTo)(point)
    pen.closePath()
    return pen.glyph()


@contextmanager
def _document() -> Iterator[FPDF]:
    """A letter-size document in the sample font (fpdf2 reads fonts from files: one in a temporary folder)."""
    with tempfile.TemporaryDirectory() as folder:
        font = Path(folder) / "sample.ttf"
        font.write_bytes(sample_font())
        pdf = FPDF(unit="pt", format="letter")
        pdf.set_margins(72, 72)
        pdf.set_auto_page_break(False)
        pdf.add_font("EmulatorTest", fname=font)
        pdf.set_font("EmulatorTest", size=10)
        yield pdf


def _paragraph(pdf: FPDF, text: str, size: float, width: float = 0) -> None:
    pdf.set_font_size(size)
    pdf.multi_cell(width, size * 1.2, text, align="L", new_x="LMARGIN", new_y="NEXT")
    pdf.ln(size)


def paper_pdf() -> bytes:
    with _document() as pdf:
        pdf.add_page()
        _paragraph(pdf, "\n".join(PAPER_TITLE), 16)
        _paragraph(pdf, "Abstract. " + PAPER_SENTENCE_PAGE_1 + " It keeps the ﬂow of a test short.", 10)
        pdf.add_page()
        _paragraph(pdf, "2 Emulators et al.", 8)
        _paragraph(pdf, PAPER_SENTENCE_PAGE_2 + " The reader is built from these parts:", 10)
        for number, item in enumerate(PAPER_ITEMS, start=1):
            _paragraph(pdf, f"{number}. {item}", 10, width=300)
        return bytes(pdf.output())


def list_items_pdf() -> bytes:
    with _document() as pdf:
        pdf.add_page()
        y = _words(pdf, LIST_HEADING, 72, 90, size=14, width=240)
        y = _words(pdf, LIST_PARAGRAPH, 72, y + 10, size=11, width=240)
        for item in LIST_ITEMS:
            _words(pdf, BULLET, 84, y + 8, size=11, width=20)
            y = _words(pdf, item, 102, y + 8, size=11, width=200)
        return bytes(pdf.output())


def _words(pdf: FPDF, text: str, left: float, top: float, *, size: float, width: float) -> float:
    """Draw ``text`` one word per text object, wrapped at ``width``; return the last baseline."""
    pdf.set_font_size(size)
    x, y = left, top + size
    for word in text.split():
        advance = pdf.get_string_width(word)
        if x > left and x + advance > left + width:
            x, y = left, y + size * 1.15
        pdf.text(x, y, word)
        x += advance + pdf.get_string_width(" ")
    return y


def stream(body: bytes, *, flate: bool = True) -> bytes:
    """A stream object with this (already encoded) body, Flate-decoded when read if ``flate``."""
    filters = b" /Filter /FlateDecode" if flate else b""
    return b"<< /Length %d%s >>\nstream\n" % (len(body), filters) + body + b"\nendstream"


def pages_pdf(contents: list[list[bytes]]) -> bytes:
    """A PDF whose page *i* draws the content streams ``contents[i]`` (raw bodies of stream objects), with
    Helvetica as /F1."""
    objects: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>", b""]
    kids = []
    for streams in contents:
        page = len(objects) + 1
        refs = b" ".join(b"%d 0 R" % (page + 1 + i) for i in range(len(streams)))
        kids.append(b"%d 0 R" % page)
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents [%s] "
            b"/Resources << /Font << /F1 << /Type /Font /Subtype /Type1 /BaseFont /Helvetica >> >> >> >>"
            % refs
        )
        objects.extend(streams)
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(kids), len(kids))
    return pdf_document(objects)
