"""The emulator's ASGI application: API routes, control routes, middleware and error answers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.responses import JSONResponse, Response

from airflow_provider_workflowsvc.emulator.api import api_routes
from airflow_provider_workflowsvc.emulator.config import (
    CONTROL_PREFIX,
    EmulatorConfig,
    FaultSpec,
    ServerSettings,
)
from airflow_provider_workflowsvc.emulator.control import router as control_router
from airflow_provider_workflowsvc.emulator.errors import ApiError, InvalidRequest, render_errors
from airflow_provider_workflowsvc.emulator.guard import AccessGuard
from airflow_provider_workflowsvc.emulator.middleware import ApiMiddleware
from airflow_provider_workflowsvc.emulator.state import EmulatorState

__all__ = ["EmulatorState", "create_app"]


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return JSONResponse({"detail": exc.detail}, exc.status_code, headers=exc.headers)


async def _invalid_request(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, InvalidRequest)
    return JSONResponse({"detail": exc.errors}, 422)


async def _fastapi_validation(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    return JSONResponse({"detail": render_errors(exc.errors())}, 422)


def create_app(
    settings: ServerSettings | None = None,
    config: EmulatorConfig | None = None,
    faults: FaultSpec | None = None,
) -> FastAPI:
    """Create an emulator application with its own state (in memory unless ``settings.db`` names a file)."""
    state = EmulatorState(settings or ServerSettings(), config or EmulatorConfig(), faults)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if state.settings.dialect == "platform":
            state.deliveries.start()
        yield
        await state.deliveries.stop()
        state.close()

    app = FastAPI(
        title="Workflow Service emulator",
        docs_url=f"{CONTROL_PREFIX}/docs",
        openapi_url=f"{CONTROL_PREFIX}/openapi.json",
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.emulator = state
    app.router.redirect_slashes = False
    # first: the hot polling routes are matched soonest
    app.router.routes[:0] = api_routes(state.settings.dialect)
    app.include_router(control_router)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(InvalidRequest, _invalid_request)
    app.add_exception_handler(RequestValidationError, _fastapi_validation)
    app.add_middleware(ApiMiddleware, state=state)
    app.add_middleware(AccessGuard, token=state.settings.token)  # added last: runs first
    return app
