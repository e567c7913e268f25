"""The workflow templates the emulated service offers (platform dialect): ids, descriptions and nodes."""

from __future__ import annotations

import uuid
from typing import Any

from airflow_provider_workflowsvc.emulator.errors import ApiError
from airflow_provider_workflowsvc.emulator.schema import TemplateDetail, TemplateListItem, TemplateNode

__all__ = ["TEMPLATES", "get_template", "list_templates", "template_ids"]

_NAMESPACE = uuid.UUID("5a0c2f4e-8d61-4b7a-9e3f-1c2d3e4f5a6b")
_VERSION = "1.0.0"
_LAST_UPDATED = "2025-12-01T00:00:00.000000"
_HI_RES = {"strategy": "hi_res", "include_page_breaks": False, "infer_table_structure": True}


def _node(
    template_id: str, name: str, node_type: str, subtype: str, settings: dict[str, Any]
) -> TemplateNode:
    node_id = str(uuid.uuid5(_NAMESPACE, f"{template_id}/{name}"))  # stable across restarts
    return TemplateNode(id=node_id, name=name, type=node_type, subtype=subtype, settings=settings)


def _template(
    template_id: str, name: str, description: str, *nodes: tuple[str, str, str, dict[str, Any]]
) -> TemplateDetail:
    return TemplateDetail(
        id=template_id,
        name=name,
        description=description,
        version=_VERSION,
        last_updated=_LAST_UPDATED,
        nodes=[_node(template_id, *node) for node in nodes],
    )


TEMPLATES: dict[str, TemplateDetail] = {
    t.id: t
    for t in (
        _template(
            "hi_res_partition",
            "High Resolution Partition",
            "Partitions each document with the high-resolution strategy into elements.",
            ("Partitioner", "partition", "unstructured_api", _HI_RES),
        ),
        _template(
            "hi_res_and_enrichment",
            "High Resolution Partition and Enrichment",
            "Partitions with the high-resolution strategy, then describes images and tables.",
            ("Partitioner", "partition", "unstructured_api", _HI_RES),
            ("Image description", "prompter", "openai_image_description", {"model": "gpt-4o"}),
            ("Table description", "prompter", "openai_table_description", {"model": "gpt-4o"}),
        ),
    )
}
"""The catalogue: every template the emulator knows, by id (nodes the emulator's pipeline runs)."""


def template_ids() -> tuple[str, ...]:
    return tuple(TEMPLATES)


def list_templates() -> list[dict[str, Any]]:
    """Return the answer of ``GET /templates/``: every template without its nodes."""
    return [
        TemplateListItem.model_validate(t.model_dump(exclude={"nodes"})).model_dump(mode="json")
        for t in TEMPLATES.values()
    ]


def get_template(template_id: str) -> TemplateDetail:
    """One template with its nodes; 404 when the catalogue has no such id."""
    template = TEMPLATES.get(template_id)
    if template is None:
        raise ApiError(404, f"Template not found; the templates are: {', '.join(TEMPLATES)}")
    return template
