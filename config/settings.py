"""Process settings, read once at the edge (CONVENTIONS §12): pydantic-settings, env prefix ``A3S_``.

``A3S_BROKER_URL`` unset → embedded mode (everything in process, no server). Set → the same calls
become Celery jobs on that Redis broker (SPEC F-1).
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="A3S_", extra="ignore")

    broker_url: str | None = Field(default=None, description="redis://host:port/db; unset = embedded mode")
    result_backend: str | None = Field(default=None, description="defaults to the broker URL")
    state_url: str | None = Field(
        default=None, description="Redis for breakers/bulkheads/steps; defaults to broker"
    )
    queue: str = "a3s.tools"
    default_policy: str = "conservative"
    job_time_limit_s: int = 900
    job_soft_time_limit_s: int = 840
    visibility_timeout_s: int = 1800
    max_deliveries: int = 3
    # Comma-separated modules exposing ``TOOLS`` (a list) or ``TOOL``: registered in every session an
    # Agent builds, on the orchestrator and on workers alike (plugins, test and bench tools).
    extra_tools: str = ""
    log_level: str = "WARNING"

    @property
    def embedded(self) -> bool:
        return not self.broker_url
