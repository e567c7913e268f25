"""
What a workflow's nodes do to a document's elements after the partitioner: chunkers and embedders.

As the live service's docs describe the nodes (type ``chunk``: subtypes ``chunk_by_title``,
``chunk_by_character``, ``chunk_by_page``, ``chunk_by_similarity``; type ``embed``: the subtype names the
provider, ``settings.model_name`` the model). Other node types (``partition``, ``prompter``, ...) leave
the elements as they are. A subtype, model or setting the service would not accept fails the file, with
a reason naming it (never the document's content).

Chunking, simply but with the documented semantics: text elements are combined into ``CompositeElement``
chunks up to ``new_after_n_chars`` (soft) and ``max_characters`` (hard, default 500); an element longer
than that is split (``overlap`` characters repeated between its pieces, between every chunk with
``overlap_all``); a ``Table`` stays a chunk of its own (``TableChunk`` pieces when split). Boundaries:
each ``Title`` (by title; each page too unless ``multipage_sections``), each page (by page), where the
words of consecutive elements differ (by similarity: cosine of word counts below
``similarity_threshold``). With ``include_orig_elements`` a chunk carries the elements it was made of in
``metadata.orig_elements``: base64 of zlib-compressed JSON, as the service writes it.

Embedding: every element gets ``embeddings``, a unit vector of the model's documented dimension drawn
from a hash of the model and the element's text: the same text always gives the same vector.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import struct
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from airflow_provider_workflowsvc.emulator.partition import PartitionError

__all__ = ["EMBEDDING_MODELS", "NodeError", "decode_orig_elements", "run_nodes"]

EMBEDDING_MODELS: dict[str, dict[str, int]] = {
    "azure_openai": {
        "text-embedding-3-small": 1536,
        "text-embedding-3-large": 3072,
        "text-embedding-ada-002": 1536,
    },
    "bedrock": {
        "amazon.titan-embed-text-v1": 1536,
        "amazon.titan-embed-text-v2:0": 1024,
        "amazon.titan-embed-image-v1": 1024,
        "cohere.embed-english-v3": 1024,
        "cohere.embed-multilingual-v3": 1024,
    },
    "ibm": {"ibm/slate-125m-english-rtrvr": 768, "ibm/slate-30m-english-rtrvr": 384},
    "togetherai": {
        "togethercomputer/m2-bert-80M-2k-retrieval": 768,
        "togethercomputer/m2-bert-80M-8k-retrieval": 768,
        "togethercomputer/m2-bert-80M-32k-retrieval": 768,
    },
    "voyageai": {
        "voyage-3": 1024,
        "voyage-3-large": 1024,
        "voyage-3-lite": 512,
        "voyage-code-3": 1024,
        "voyage-code-2": 1536,
        "voyage-finance-2": 1024,
        "voyage-law-2": 1024,
        "voyage-multimodal-3": 1024,
    },
}
"""Embedding providers (the node's subtype), their models (``settings.model_name``) and dimensions."""
_MODEL_DIMENSIONS = {model: size for models in EMBEDDING_MODELS.values() for model, size in models.items()}
_MAX_CHARACTERS = 500
_SIMILARITY_THRESHOLD = 0.5
_TABLE_TYPES = frozenset({"Table", "TableChunk"})
_WORD = re.compile(r"\w+")


class NodeError(PartitionError):
    """A node cannot process the file: its subtype, model or settings are not the service's."""


def run_nodes(nodes: Iterable[Mapping[str, Any]], elements: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return a document's elements after every chunk and embed node of ``nodes``, in order."""
    for node in nodes:
        kind, subtype = node.get("type"), str(node.get("subtype") or "")
        settings = node.get("settings") or {}
        if kind == "chunk":
            elements = _chunk(subtype, settings, elements)
        elif kind == "embed":
            elements = _embed(subtype, settings, elements)
    return elements


def decode_orig_elements(value: str) -> list[dict[str, Any]]:
    """Return the elements of a chunk's ``metadata.orig_elements`` (base64 of zlib-compressed JSON)."""
    elements: list[dict[str, Any]] = json.loads(zlib.decompress(base64.b64decode(value)))
    return elements


# --------------------------------------------------------------------------------------------------
# Chunkers


def _int_setting(settings: Mapping[str, Any], name: str, default: int | None, low: int = 0) -> int | None:
    value = settings.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value < low:
        raise NodeError(f"chunker setting {name} must be an integer of at least {low}")
    return int(value)


def _chunk(subtype: str, settings: Mapping[str, Any], elements: list[dict[str, Any]]) -> list[dict[str, Any]]:
    boundary = _BOUNDARIES.get(subtype)
    if boundary is None:
        raise NodeError(f"unknown chunker subtype {subtype!r}; the chunkers are: {', '.join(_BOUNDARIES)}")
    hard = _int_setting(settings, "max_characters", _MAX_CHARACTERS, low=1) or _MAX_CHARACTERS
    soft = min(_int_setting(settings, "new_after_n_chars", hard) or hard, hard)
    overlap = _int_setting(settings, "overlap", 0) or 0
    if overlap >= hard:
        raise NodeError("chunker setting overlap must be smaller than max_characters")
    combine = min(_int_setting(settings, "combine_text_under_n_chars", 0) or 0, hard)
    threshold = settings.get("similarity_threshold", _SIMILARITY_THRESHOLD)
    if subtype == "chunk_by_similarity" and not (isinstance(threshold, (int, float)) and 0 < threshold < 1):
        raise NodeError("chunker setting similarity_threshold must be a number between 0 and 1 (exclusive)")
    multipage = bool(settings.get("multipage_sections", False))

    def breaks(chunk: list[dict[str, Any]], element: dict[str, Any]) -> bool:
        last, size = chunk[-1], len(_joined(chunk))
        return boundary(last, element, multipage, float(threshold)) and not (
            subtype == "chunk_by_title" and size < combine and size + 2 + len(element["text"]) <= hard
        )

    groups: list[list[dict[str, Any]]] = []
    for element in elements:
        table = element["type"] in _TABLE_TYPES
        current = groups[-1] if groups else None
        if (
            current is None
            or table
            or current[-1]["type"] in _TABLE_TYPES
            or breaks(current, element)
            or len(_joined(current)) >= soft
            or len(_joined(current)) + 2 + len(element["text"]) > hard
        ):
            groups.append([element])
        else:
            current.append(element)
    chunks = [piece for group in groups for piece in _pieces(group, hard, overlap)]
    if settings.get("overlap_all") and overlap:
        chunks = [
            (kind, group, text if i == 0 else chunks[i - 1][2][-overlap:] + " " + text)
            for i, (kind, group, text) in enumerate(chunks)
        ]
    keep = bool(settings.get("include_orig_elements", False))
    return [
        _chunk_element(index, kind, group, text, keep) for index, (kind, group, text) in enumerate(chunks)
    ]


def _joined(group: list[dict[str, Any]]) -> str:
    return "\n\n".join(e["text"] for e in group)


def _pieces(
    group: list[dict[str, Any]], hard: int, overlap: int
) -> list[tuple[str, list[dict[str, Any]], str]]:
    """Return the chunks of one group: it, or the pieces of its text over ``hard`` characters."""
    table = group[0]["type"] in _TABLE_TYPES
    text = _joined(group)
    if len(text) <= hard:
        return [("Table" if table else "CompositeElement", group, text)]
    step, pieces = hard - overlap, []
    for start in range(0, len(text), step):
        pieces.append(("TableChunk" if table else "CompositeElement", group, text[start : start + hard]))
        if start + hard >= len(text):
            break
    return pieces


def _chunk_element(
    index: int, kind: str, group: list[dict[str, Any]], text: str, keep: bool
) -> dict[str, Any]:
    first = group[0]
    metadata = {k: v for k, v in first["metadata"].items() if k not in ("text_as_html", "orig_elements")}
    if kind == "Table" and "text_as_html" in first["metadata"]:
        metadata["text_as_html"] = first["metadata"]["text_as_html"]
    if keep:
        packed = zlib.compress(json.dumps(group, separators=(",", ":")).encode())
        metadata["orig_elements"] = base64.b64encode(packed).decode("ascii")
    seed = f"{metadata.get('filename')}\0{index}\0{kind}\0{text}"
    return {
        "type": kind,
        "element_id": hashlib.sha256(seed.encode()).hexdigest()[:32],
        "text": text,
        "metadata": metadata,
    }


def _new_page(last: dict[str, Any], element: dict[str, Any]) -> bool:
    return bool(last["metadata"].get("page_number") != element["metadata"].get("page_number"))


def _by_title(last: dict[str, Any], element: dict[str, Any], multipage: bool, _threshold: float) -> bool:
    return element["type"] == "Title" or (not multipage and _new_page(last, element))


def _words(text: str) -> Counter[str]:
    return Counter(word.lower() for word in _WORD.findall(text))


def _by_similarity(last: dict[str, Any], element: dict[str, Any], _multipage: bool, threshold: float) -> bool:
    a, b = _words(last["text"]), _words(element["text"])
    norm = math.sqrt(sum(v * v for v in a.values()) * sum(v * v for v in b.values()))
    return norm == 0 or sum(a[w] * b[w] for w in a) / norm < threshold


_BOUNDARIES: dict[str, Callable[[dict[str, Any], dict[str, Any], bool, float], bool]] = {
    "chunk_by_title": _by_title,
    "chunk_by_character": lambda *_: False,
    "chunk_by_page": lambda last, element, *_: _new_page(last, element),
    "chunk_by_similarity": _by_similarity,
}
"""Each chunker and where it must start a new chunk (beside the size limits and tables)."""


# --------------------------------------------------------------------------------------------------
# Embedders


def _embed(subtype: str, settings: Mapping[str, Any], elements: list[dict[str, Any]]) -> list[dict[str, Any]]:
    model = settings.get("model_name")
    if subtype in EMBEDDING_MODELS:
        if model is None:
            raise NodeError(f"embedder of provider {subtype!r} needs settings.model_name")
        if model not in EMBEDDING_MODELS[subtype]:
            known = ", ".join(EMBEDDING_MODELS[subtype])
            raise NodeError(
                f"unknown embedding model {model!r} of provider {subtype!r}; its models are: {known}"
            )
    elif subtype in _MODEL_DIMENSIONS and model in (None, subtype):  # the model named as the subtype
        model = subtype
    else:
        raise NodeError(
            f"unknown embedder subtype {subtype!r}; the providers are: {', '.join(EMBEDDING_MODELS)}"
        )
    size = _MODEL_DIMENSIONS[str(model)]
    return [{**element, "embeddings": embedding(str(model), element["text"], size)} for element in elements]


def embedding(model: str, text: str, size: int) -> list[float]:
    """Return a unit vector of ``size`` numbers drawn from a hash of the model and the text."""
    raw = struct.unpack(f"<{size}h", hashlib.shake_256(f"{model}\0{text}".encode()).digest(2 * size))
    norm = math.sqrt(sum(v * v for v in raw)) or 1.0
    return [round(v / norm, 6) for v in raw]
