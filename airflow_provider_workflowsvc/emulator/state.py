"""One emulator instance's state: settings, service, faults and request log (read by routes, middleware)."""

from __future__ import annotations

from airflow_provider_workflowsvc.emulator.channels import Channels
from airflow_provider_workflowsvc.emulator.clock import Clock
from airflow_provider_workflowsvc.emulator.config import EmulatorConfig, FaultSpec, ServerSettings
from airflow_provider_workflowsvc.emulator.events import Notifications
from airflow_provider_workflowsvc.emulator.faults import FaultInjector, RequestLog
from airflow_provider_workflowsvc.emulator.service import Service
from airflow_provider_workflowsvc.emulator.store import Store
from airflow_provider_workflowsvc.emulator.webhooks import Deliveries

__all__ = ["EmulatorState"]


class EmulatorState:
    """Everything one emulator instance holds: settings, the service, faults and the request log."""

    def __init__(
        self, settings: ServerSettings, config: EmulatorConfig, faults: FaultSpec | None = None
    ) -> None:
        self.settings, self.defaults = settings, config
        store = Store(settings.db)
        clock = Clock(float(store.get_meta("clock_offset", "0") or 0))
        self.service = Service(store, clock, config.model_copy(), settings.dialect)
        self.notifications = Notifications(self.service)
        self.channels = Channels(self.service, lambda: self.deliveries.settings.allow_http_loopback)
        self.deliveries = Deliveries(self.notifications, self.channels)
        self.faults = FaultInjector()
        if faults is not None:
            self.faults.set(faults)
        self.log = RequestLog()

    def reset(self) -> None:
        self.service.reset()
        self.notifications.reset()
        self.service.config = self.defaults.model_copy()
        self.faults.clear()
        self.log.clear()
        self.deliveries.reset()

    def close(self) -> None:
        self.service.store.close()
