"""The ``/_emulator`` control endpoints tests use (bearer token required): see the package docstring."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from fastapi import APIRouter, Body, Request
from pydantic import BaseModel, Field, ValidationError

from airflow_provider_workflowsvc.emulator.config import (
    API_PREFIX,
    CONTROL_PREFIX,
    EmulatorConfig,
    FaultRule,
    FaultSpec,
    WebhookSettings,
)
from airflow_provider_workflowsvc.emulator.errors import InvalidRequest

if TYPE_CHECKING:
    from airflow_provider_workflowsvc.emulator.state import EmulatorState

__all__ = ["router"]

router = APIRouter(prefix=CONTROL_PREFIX, tags=["emulator control"])
_Model = TypeVar("_Model", bound=BaseModel)


class Advance(BaseModel):
    seconds: float = Field(ge=0)


def _body(model: type[_Model], data: dict[str, Any]) -> _Model:
    """Return ``data`` read as ``model``; a 422 naming the body's fields when it does not fit."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InvalidRequest.from_pydantic(exc, ("body",)) from None


def _state(request: Request) -> EmulatorState:
    state: EmulatorState = request.app.state.emulator
    return state


@router.get("/health")
async def health(request: Request) -> dict[str, Any]:
    """Liveness: the API prefix, emulator time and whether state is kept in a file."""
    state = _state(request)
    return {
        "status": "ok",
        "api_prefix": API_PREFIX,
        "now": state.service.clock.now().isoformat(),
        "persistent": state.settings.db is not None,
        "api_key_required": state.settings.api_key is not None,
    }


@router.post("/reset")
async def reset(request: Request) -> dict[str, str]:
    """Drop every resource and job; clear faults and the request log; restore config and clock."""
    _state(request).reset()
    return {"status": "reset"}


@router.get("/config")
async def get_config(request: Request) -> dict[str, Any]:
    return _state(request).service.config.model_dump()


@router.put("/config")
async def put_config(request: Request, updates: Annotated[dict[str, Any], Body()]) -> dict[str, Any]:
    """Change some settings (the others keep their values)."""
    service = _state(request).service
    service.apply_config(_body(EmulatorConfig, {**service.config.model_dump(), **updates}))
    return service.config.model_dump()


@router.get("/faults")
async def get_faults(request: Request) -> dict[str, Any]:
    return _state(request).faults.describe()


@router.put("/faults")
async def put_faults(request: Request, spec: Annotated[dict[str, Any], Body()]) -> dict[str, Any]:
    """Replace the fault rules: ``{"rules": [...], "seed": n}`` or one rule's fields at top level."""
    faults = _state(request).faults
    faults.set(_body(FaultSpec, spec))
    return faults.describe()


@router.post("/faults/rules")
async def add_fault_rule(request: Request, rule: Annotated[dict[str, Any], Body()]) -> dict[str, Any]:
    """Add one fault rule after the active ones (their counts go on)."""
    faults = _state(request).faults
    faults.add(_body(FaultRule, rule))
    return faults.describe()


@router.delete("/faults")
async def delete_faults(request: Request) -> dict[str, Any]:
    faults = _state(request).faults
    faults.clear()
    return faults.describe()


@router.get("/requests")
async def get_requests(
    request: Request, method: str | None = None, path_contains: str | None = None
) -> list[dict[str, Any]]:
    """Return the logged API requests, oldest first, optionally filtered."""
    return _state(request).log.query(method, path_contains)


@router.delete("/requests")
async def delete_requests(request: Request) -> dict[str, str]:
    _state(request).log.clear()
    return {"status": "cleared"}


@router.get("/jobs")
async def get_jobs(request: Request) -> list[dict[str, Any]]:
    """Every job, oldest first: status, times, and each file's name as received and why it failed."""
    return _state(request).service.job_records()


def _clock(state: EmulatorState) -> dict[str, Any]:
    clock = state.service.clock
    return {"now": clock.now().isoformat(), "offset_seconds": clock.offset}


@router.get("/clock")
async def get_clock(request: Request) -> dict[str, Any]:
    return _clock(_state(request))


@router.post("/clock/advance")
async def advance_clock(request: Request, advance: Advance) -> dict[str, Any]:
    """Move emulator time forward; schedules that fall due fire (one job per occurrence)."""
    state = _state(request)
    created = state.service.advance_clock(advance.seconds)
    return {**_clock(state), "jobs_created": created}


@router.get("/webhooks")
async def get_webhooks(request: Request) -> dict[str, Any]:
    """Return the switches, and how many deliveries their ``delay`` holds right now (``waiting``)."""
    return _webhooks(_state(request))


def _webhooks(state: EmulatorState) -> dict[str, Any]:
    return {**state.deliveries.settings.model_dump(), "waiting": state.deliveries.waiting}


@router.put("/webhooks")
async def put_webhooks(request: Request, updates: Annotated[dict[str, Any], Body()]) -> dict[str, Any]:
    """Change some webhook switches (the others keep their values): loopback HTTP, faults, seed."""
    state = _state(request)
    state.deliveries.configure(_body(WebhookSettings, {**state.deliveries.settings.model_dump(), **updates}))
    return _webhooks(state)


@router.get("/webhooks/deliveries")
async def get_deliveries(request: Request) -> list[dict[str, Any]]:
    """Every delivery attempt, oldest first: channel, event, message id, body, outcome, faults."""
    return list(_state(request).deliveries.log)


@router.delete("/webhooks/deliveries")
async def delete_deliveries(request: Request) -> dict[str, str]:
    _state(request).deliveries.log.clear()
    return {"status": "cleared"}


@router.get("/channels/{channel_id}/secret")
async def get_channel_secret(request: Request, channel_id: str) -> dict[str, str]:
    """Reveal the secret a channel signs with: its custom one, or the one the emulator generated."""
    return {"secret": _state(request).channels.secret(channel_id)}
