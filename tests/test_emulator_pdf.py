"""The emulator's PDFs: text and pages as pypdf reads them, elements per page, bounds, failure reasons.

Every PDF here is written at test time (``pdf_samples``): by fpdf2 in the shapes of the public SDK's two
sample PDFs (a paper with ligature glyphs; a list page in a CID-keyed font, the hand-written reader's
blind spot), or object by object where fpdf2 writes no such structure.
"""

from __future__ import annotations

import unicodedata
import zlib
from typing import Any

import pytest
from pdf_samples import (
    LIST_HEADING,
    LIST_ITEMS,
    LIST_PARAGRAPH,
    PAPER_ITEMS,
    PAPER_SENTENCE_PAGE_1,
    PAPER_SENTENCE_PAGE_2,
    PAPER_TITLE,
    list_items_pdf,
    pages_pdf,
    paper_pdf,
    sample_font,
    stream,
)

from airflow_provider_workflowsvc.emulator import _pdf
from airflow_provider_workflowsvc.emulator._pdf import MAX_STREAM_BYTES, PdfError, pdf_pages
from airflow_provider_workflowsvc.emulator.partition import PartitionError, partition
from airflow_provider_workflowsvc.emulator.samples import pdf_document, simple_pdf
from airflow_provider_workflowsvc.models import Element


def elements_of(data: bytes, name: str = "doc.pdf") -> list[dict[str, Any]]:
    return partition(name, "application/pdf", data)


def texts(elements: list[dict[str, Any]], page: int | None = None) -> list[tuple[str, str]]:
    return [(e["type"], e["text"]) for e in elements if page is None or e["metadata"]["page_number"] == page]


def page_text(elements: list[dict[str, Any]], page: int) -> str:
    return " ".join(text for _, text in texts(elements, page))


# --------------------------------------------------------------------------------------------------
# The public SDK's sample PDFs, in shape


def test_a_paper_gives_its_pages_sentences_and_ligatures() -> None:
    elements = elements_of(paper_pdf())
    assert {e["metadata"]["page_number"] for e in elements} == {1, 2}
    assert texts(elements, 1)[0] == ("Title", " ".join(PAPER_TITLE))
    assert PAPER_SENTENCE_PAGE_1 in page_text(elements, 1)
    assert PAPER_SENTENCE_PAGE_2 in page_text(elements, 2)
    assert PAPER_SENTENCE_PAGE_2 not in page_text(elements, 1)
    assert [("ListItem", item) for item in PAPER_ITEMS] == texts(elements, 2)[-2:]
    for element in elements:
        Element.model_validate(element)
        assert (element["metadata"]["filename"], element["metadata"]["filetype"]) == (
            "doc.pdf",
            "application/pdf",
        )


def test_ligature_glyphs_come_out_as_the_fonts_name_them() -> None:
    """The font's ToUnicode map names the ligature glyphs (U+FB01 ...): kept, never dropped ("Uni ed")."""
    text = " ".join(text for _, text in texts(elements_of(paper_pdf())))
    for word in ("Uniﬁed", "Workﬂow", "oﬄine", "eﬀortlessly"):
        assert word in text
    assert "Uni ed" not in text
    assert "Unified Toolkit" in unicodedata.normalize("NFKC", text)  # what a search for "Unified" sees


def test_a_list_page_in_a_cid_font_gives_a_heading_a_paragraph_and_its_items() -> None:
    """Two-byte glyph codes of a Type0 font read through its ToUnicode map (the old reader found no
    text); wrapped items are one element each, their bullets gone."""
    elements = elements_of(list_items_pdf())
    assert texts(elements) == [
        ("Title", LIST_HEADING),
        ("NarrativeText", LIST_PARAGRAPH),
        *[("ListItem", item) for item in LIST_ITEMS],
    ]
    assert {e["metadata"]["page_number"] for e in elements} == {1}


def test_the_sample_font_is_what_the_fixtures_claim() -> None:
    """The fixtures' structure: an embedded Type0 font with a ToUnicode map, its glyphs two-byte codes."""
    import io

    import pypdf

    reader = pypdf.PdfReader(io.BytesIO(list_items_pdf()))
    (font,) = [f.get_object() for f in reader.pages[0]["/Resources"]["/Font"].values()]
    assert (font["/Subtype"], font["/Encoding"]) == ("/Type0", "/Identity-H")
    assert "/ToUnicode" in font
    assert b"Td (\x00" in reader.pages[0].get_contents().get_data()  # two-byte glyph codes
    assert len(sample_font()) > 1000


def skia_like_pdf(lines: list[str]) -> bytes:
    """A page that draws each word in a text object of its own, under a flipped text matrix, each glyph
    placed by its own ``Td`` (as ``list-item-example-1.pdf`` draws them): pypdf breaks a line after
    every word there."""
    step = 0.6 * 14.67  # Courier's advance at 14.67 points

    def word(text: str, x: float) -> bytes:
        glyphs = [b"1 0 0 -1 %.2f .48 Tm 0 -13.28 Td (%s) Tj" % (x, text[:1].encode())]
        glyphs += [b"%.3f 0 Td (%s) Tj" % (step, ch.encode()) for ch in text[1:]]
        return b"BT /F1 14.67 Tf " + b" ".join(glyphs) + b" ET"

    drawn = [b"1 0 0 -1 0 792 cm"]
    for number, line in enumerate(lines):
        x, words = 0.0, []
        for text in line.split():
            words.append(word(text, x))
            x += step * (len(text) + 1)
        drawn.append(b"q .75 0 0 .75 77.25 %.2f cm " % (92.5 + 12.7 * number) + b"\n".join(words) + b" Q")
    font = b"<< /Type /Font /Subtype /Type1 /BaseFont /Courier >>"
    return pdf_document(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
            b"/Resources << /Font << /F1 " + font + b" >> >> >>",
            stream(b"\n".join(drawn), flate=False),
        ]
    )


def test_words_drawn_one_text_object_each_are_joined_on_their_line() -> None:
    import io

    import pypdf

    data = skia_like_pdf(["What are the inputs?", "Who reads the output?"])
    assert pypdf.PdfReader(io.BytesIO(data)).pages[0].extract_text().split("\n")[:3] == ["What", "are", "the"]
    assert [line.text for line in pdf_pages(data)[0]] == ["What are the inputs?", "Who reads the output?"]
    assert texts(elements_of(data)) == [("NarrativeText", "What are the inputs? Who reads the output?")]


# --------------------------------------------------------------------------------------------------
# Pages


@pytest.mark.parametrize("compress", [False, True])
def test_simple_pdf_pages(compress: bool) -> None:
    data = simple_pdf([["Hello PDF", "First page body text."], ["Second (page) title"]], compress=compress)
    elements = elements_of(data)
    assert texts(elements) == [
        ("NarrativeText", "Hello PDF First page body text."),
        ("Title", "Second (page) title"),
    ]
    assert [e["metadata"]["page_number"] for e in elements] == [1, 2]
    assert elements[0]["metadata"]["filetype"] == "application/pdf"


def text_content(*lines: str, top: int = 720) -> bytes:
    shown = " ".join(f"({line}) Tj 0 -14 Td" for line in lines)
    return f"BT /F1 12 Tf 72 {top} Td {shown} ET".encode()


def text_stream(*lines: str, top: int = 720) -> bytes:
    return stream(zlib.compress(text_content(*lines, top=top)))


def test_pages_come_from_the_page_tree_not_from_content_streams() -> None:
    """A page drawn by two content streams is one page; a blank page keeps its number (the old reader
    took each content stream as a page)."""
    data = pages_pdf(
        [
            [text_stream("First page, first stream."), text_stream("First page, second stream.", top=400)],
            [stream(zlib.compress(b"0 0 m 100 100 l S"))],
            [text_stream("Third page.")],
        ]
    )
    elements = elements_of(data)
    assert [(e["metadata"]["page_number"], e["text"]) for e in elements] == [
        (1, "First page, first stream."),
        (1, "First page, second stream."),
        (3, "Third page."),
    ]


def test_paragraphs_follow_gaps_sizes_and_indents() -> None:
    content = (
        b"BT /F1 18 Tf 72 720 Td (Annual Report) Tj ET "
        b"BT /F1 10 Tf 72 690 Td (The first paragraph runs) Tj 0 -12 Td (over two lines.) Tj "
        b"15 -12 Td (An indented line starts the second.) Tj -15 -12 Td (It goes on here.) Tj "
        b"0 -30 Td (After a gap, a third.) Tj ET"
    )
    assert texts(elements_of(pages_pdf([[stream(zlib.compress(content))]]))) == [
        ("Title", "Annual Report"),
        ("NarrativeText", "The first paragraph runs over two lines."),
        ("NarrativeText", "An indented line starts the second. It goes on here."),
        ("NarrativeText", "After a gap, a third."),
    ]


def test_superscripts_and_control_characters_stay_on_their_line() -> None:
    content = (
        b"BT /F1 10 Tf 72 700 Td (Shen) Tj ET BT /F1 7 Tf 96 703.7 Td (1) Tj ET "
        b"BT /F1 10 Tf 100 700 Td ( and Zhang\\000) Tj ET"
    )
    assert [line.text for line in pdf_pages(pages_pdf([[stream(zlib.compress(content))]]))[0]] == [
        "Shen1 and Zhang"
    ]


# --------------------------------------------------------------------------------------------------
# Failure reasons


def encrypted_pdf(user_password: str | None = "reader") -> bytes:
    """A PDF encrypted with AES-256 that opens with ``user_password`` (None: with no password, as a
    PDF whose owner only restricts printing or copying)."""
    from fpdf import FPDF
    from fpdf.enums import EncryptionMethod

    pdf = FPDF()
    pdf.set_encryption("owner", user_password, encryption_method=EncryptionMethod.AES_256)
    pdf.add_page()
    pdf.set_font("helvetica", size=12)
    pdf.cell(text="A restricted page.")
    return bytes(pdf.output())


def test_an_encrypted_pdf_that_opens_without_a_password_is_read() -> None:
    """As pypdf, the service and the public SDK's own PDF check do: only a PDF that needs a password fails."""
    data = encrypted_pdf(user_password=None)
    assert b"/Encrypt" in data
    assert b"restricted" not in data  # the text is encrypted in the file
    assert texts(elements_of(data)) == [("NarrativeText", "A restricted page.")]


def image_only_pdf() -> bytes:
    """One page holding one image and no text (a scan)."""
    pixels = zlib.compress(bytes(30 * 30))
    image = b"<< /Type /XObject /Subtype /Image /Width 30 /Height 30 /ColorSpace /DeviceGray "
    image += b"/BitsPerComponent 8 /Length %d /Filter /FlateDecode >>\nstream\n" % len(pixels)
    return pdf_document(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
            b"/Resources << /XObject << /Im1 5 0 R >> >> >>",
            stream(zlib.compress(b"q 300 0 0 300 100 400 cm /Im1 Do Q")),
            image + pixels + b"\nendstream",
        ]
    )


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"hello", "not a PDF: the %PDF- header is missing"),
        (encrypted_pdf(), r"encrypted PDF: it needs a password to open \(decrypt it first\)"),
        (image_only_pdf(), r"image-only PDF: its 1 page\(s\) hold images but no text layer"),
        (pages_pdf([[stream(b"0 0 m 9 9 l S", flate=False)]] * 2), r"no extractable text .* 2 page\(s\)"),
        (b"%PDF-1.4\n1 0 obj\n<< /Length 3 >>\nstream\nabc\nendstream\n", r"corrupt PDF: pypdf cannot"),
        (pages_pdf([[stream(b"abc")]]), "no extractable text"),
    ],
    ids=["not-a-pdf", "encrypted", "image-only", "no-text", "no-page-tree", "corrupt-stream"],
)
def test_unreadable_pdfs_say_why(data: bytes, reason: str) -> None:
    with pytest.raises(PdfError, match=reason):
        pdf_pages(data)
    with pytest.raises(PartitionError, match=reason):
        elements_of(data)


def test_a_failure_reason_never_quotes_the_file() -> None:
    """pypdf's own messages may show the file's objects: the reason names only the kind of failure."""
    data = b"%PDF-1.4\n1 0 obj\n<< /Secret (s3cr3t-value) >>\nendobj\ntrailer\n<< /Root 1 0 R >>\n%%EOF\n"
    with pytest.raises(PdfError) as info:
        pdf_pages(data)
    assert "s3cr3t" not in str(info.value)


# --------------------------------------------------------------------------------------------------
# Bounds: hostile PDFs fail early


def flate_bomb(segments: int) -> bytes:
    """A zlib stream of ``segments`` times 4 MiB of zeros, built without ever holding them (about 4 KiB each).

    Each segment is a raw deflate run ending byte-aligned (sync flush) that only refers one byte back,
    so repeating it is a valid stream; a final empty block and the Adler-32 of all those zeros close it.
    """
    chunk = 4 * 1024 * 1024
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    segment = deflate.compress(bytes(chunk)) + deflate.flush(zlib.Z_SYNC_FLUSH)
    adler = ((segments * chunk) % 65521) << 16 | 1  # Adler-32 of zeros: a = 1, b = length
    return b"\x78\xda" + segment * segments + b"\x03\x00" + adler.to_bytes(4, "big")


def test_the_flate_bomb_is_what_it_claims() -> None:
    assert zlib.decompress(flate_bomb(3)) == bytes(3 * 4 * 1024 * 1024)


def test_a_flate_bomb_stops_at_the_stream_limit_without_inflating() -> None:
    """2 MiB that would inflate to 2 GiB: pypdf's decoder stops at the emulator's 16 MiB per stream."""
    import tracemalloc

    data = pages_pdf([[stream(flate_bomb(512))]])
    assert 1.9 * 1024 * 1024 < len(data) < 2.1 * 1024 * 1024
    tracemalloc.start()
    try:
        with pytest.raises(PartitionError, match="PDF content too large"):
            elements_of(data, "bomb.pdf")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * MAX_STREAM_BYTES + 4 * len(data)  # the capped output and its buffers, not 2 GiB


def test_the_stream_limit_is_the_emulators_not_pypdfs_default() -> None:
    """Just over 16 MiB fails (pypdf alone allows 75 MB), just under is read."""
    over = pages_pdf(
        [[stream(zlib.compress(b"BT /F1 12 Tf 72 700 Td (x) Tj ET " + bytes(MAX_STREAM_BYTES)))]]
    )
    with pytest.raises(PdfError, match="PDF content too large"):
        pdf_pages(over)
    under = b"BT /F1 12 Tf 72 700 Td (fits) Tj ET %" + b" " * (MAX_STREAM_BYTES - 64) + b"\n"
    assert [line.text for line in pdf_pages(pages_pdf([[stream(zlib.compress(under))]]))[0]] == ["fits"]


def test_the_decoded_total_spans_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    page = [text_stream("x" * 40)]
    monkeypatch.setattr(
        _pdf, "MAX_CONTENT_BYTES", 2 * len(text_content("x" * 40))
    )  # two pages fit, not three
    assert len(pdf_pages(pages_pdf([page, page]))) == 2
    with pytest.raises(PdfError, match="PDF content too large"):
        pdf_pages(pages_pdf([page, page, page]))


def test_the_decoded_count_takes_each_stream_once_also_when_decoded_after_it_was_read() -> None:
    import io

    import pypdf

    reader = pypdf.PdfReader(io.BytesIO(pages_pdf([[text_stream("abc")]])))
    decoded = _pdf._DecodedBytes(reader)
    content = reader.get_object(4)  # the page's content stream: read, not decoded yet
    assert decoded.count() == 0
    content.get_data()
    assert decoded.count() == len(text_content("abc"))
    assert decoded.count() == len(text_content("abc"))


def test_too_many_pages_fail_before_any_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_pdf, "MAX_PAGES", 3)
    page = [text_stream("Hello")]
    assert len(pdf_pages(pages_pdf([page] * 3))) == 3
    with pytest.raises(PdfError, match="too many pages: the emulator reads at most 3"):
        pdf_pages(pages_pdf([page] * 4))


def test_the_limits_apply_to_the_emulators_reading_only() -> None:
    import pypdf

    before = pypdf.get_configuration()
    pdf_pages(paper_pdf())
    assert pypdf.get_configuration() == before
    assert before.zlib_maximum_output_length != MAX_STREAM_BYTES


# --------------------------------------------------------------------------------------------------
# pypdf, loaded with the first PDF

_LOADS_PYPDF = """
import sys
from airflow_provider_workflowsvc.emulator import create_app
from airflow_provider_workflowsvc.emulator.partition import partition
from airflow_provider_workflowsvc.emulator.samples import pdf_document, simple_pdf
create_app()
print("pypdf" in sys.modules, end=" ")
partition("a.pdf", None, simple_pdf([["Hello"]]))
print("pypdf" in sys.modules)
"""


def test_the_emulator_starts_without_pypdf_and_loads_it_for_the_first_pdf() -> None:
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", _LOADS_PYPDF], capture_output=True, text=True, timeout=120)
    assert result.stdout.split() == ["False", "True"], result.stderr


def test_without_pypdf_a_pdf_fails_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.delitem(sys.modules, "airflow_provider_workflowsvc.emulator._pdf")
    monkeypatch.setitem(sys.modules, "pypdf", None)  # what import finds when pypdf is not installed
    with pytest.raises(PartitionError, match=r"PDFs need pypdf, .*\[emulator\]"):
        elements_of(paper_pdf())


# --------------------------------------------------------------------------------------------------
# Over HTTP


def test_uploaded_pdfs_give_elements_per_page_and_failed_files_their_reason(emulator: Any) -> None:
    emulator.configure(processing_delay=100)
    with emulator.api_client() as api:
        partitioner = {"name": "Partitioner", "type": "partition", "subtype": "hi_res", "settings": {}}
        body = {
            "name": "pdfs",
            "workflow_type": "custom",
            "workflow_nodes": [partitioner],
        }  # elements, unchunked
        workflow = api.post("/workflows/", json=body).json()
        files = [
            ("input_files", (name, data, "application/pdf"))
            for name, data in (
                ("paper.pdf", paper_pdf()),
                ("list.pdf", list_items_pdf()),
                ("locked.pdf", encrypted_pdf()),
            )
        ]
        job = api.post(f"/workflows/{workflow['id']}/run", files=files).json()
        emulator.advance_clock(1000)
        record = api.get(f"/jobs/{job['id']}").json()
        outputs = [
            api.get(f"/jobs/{job['id']}/download", params=o).json() for o in record["output_node_files"]
        ]
        failed = api.get(f"/jobs/{job['id']}/failed-files").json()
    paper, listing = outputs
    assert PAPER_SENTENCE_PAGE_2 in page_text(paper, 2)
    assert [e["metadata"]["page_number"] for e in listing] == [1] * (2 + len(LIST_ITEMS))
    assert {e["metadata"]["filename"] for e in listing} == {"list.pdf"}
    assert failed["failed_files"] == [
        {
            "document": "locked.pdf",
            "error": "encrypted PDF: it needs a password to open (decrypt it first)",
        }
    ]
