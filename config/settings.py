"""Process settings, read once at the edge (CONVENTIONS §12): pydantic-settings, env prefix ``A3S_``.

``A3S_BROKER_URL`` unset → embedded mode (everything in process, no server). Set → the same calls
become Celery jobs on that Redis broker (SPEC F-1).
"""

from __future__ import annotations

from pydantic import AliasChoices, Field, SecretStr
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
    # A worker that has not refreshed its presence in Redis for this long is lost: a live worker
    # hands its unacknowledged jobs back to the queue (instead of after the visibility timeout).
    worker_lost_after_s: int = Field(default=10, ge=3)
    # How long a run's unfinished branches wait while no live worker consumes the queue.
    queue_wait_s: int = Field(default=60, ge=1)
    # Comma-separated modules exposing ``TOOLS`` (a list) or ``TOOL``: registered in every session an
    # Agent builds, on the orchestrator and on workers alike (plugins, test and bench tools).
    extra_tools: str = ""
    log_level: str = "WARNING"
    # The default agent model (A3S_MODEL), `provider:model`: openai:NAME, anthropic:NAME or
    # scripted:FILE. Its endpoint and key are the SDKs' own variables (OPENAI_BASE_URL/OPENAI_API_KEY,
    # ANTHROPIC_BASE_URL/ANTHROPIC_API_KEY), read by the process that calls the model (docs/agent.md).
    model: str | None = None
    # Bounds on every model request (docs/agent.md, flows/providers/time_bounds.py), read by the
    # process that calls the model: the longest wait for the next byte (the SDKs' read timeout) and
    # the whole request, connect to last byte. A run's earlier timeout_ms still wins.
    model_idle_timeout_s: float = Field(default=600.0, gt=0)
    model_request_timeout_s: float = Field(default=3600.0, gt=0)
    # MCP servers every session gets (A3S_MCP_CONFIG: a .mcp.json-shaped file); on a worker, the only
    # servers it will start. A3S_MCP_WORKSPACE_CONFIG=1 also reads each workspace's .mcp.json
    # (it starts programs: only where every workspace is trusted). docs/mcp-and-skills.md.
    mcp_config: str | None = None
    mcp_workspace_config: bool = False

    # Network tools (issue 12; docs/network.md). A3S_NET_ALLOW is the only way to open the SSRF
    # guard: hosts (`intranet.corp`, `*.corp`) or addresses/CIDRs (`10.0.0.0/8`), comma-separated.
    # Empty by default; for tests on loopback and private deployments.
    net_allow: str = ""
    # Extra CA certificates (a PEM file) trusted for https besides certifi's: a private CA, or a
    # TLS-inspecting proxy's. Read by each process from its own environment.
    ca_bundle: str | None = Field(default=None, description="PEM file of extra trusted CA certificates")
    searxng_url: str | None = Field(default=None, description="SearXNG base URL for web_search's api tier")
    # Keyed search APIs: keys come from each process's own environment, never from the broker.
    tavily_api_key: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("A3S_TAVILY_API_KEY", "TAVILY_API_KEY")
    )
    brave_api_key: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("A3S_BRAVE_API_KEY", "BRAVE_SEARCH_API_KEY")
    )
    # Engine URL templates, `name=url` pairs separated by spaces ({query}, {limit} are filled in),
    # overriding the defaults in tools/web_search/config.py (tests serve result pages on loopback).
    search_engine_urls: str = ""
    search_cascade: str = "headless,http,api"
    search_max_concurrent: int = 4
    # Engines a call uses when it names none (comma-separated; metadata engine_selection_source
    # "config"); empty = the automatic selection.
    search_engines: str = ""
    # The reference's health config: max_failures sets both breaker thresholds (failures and empty
    # answers in a row, default 3), suspend_seconds the transient open time (default 60).
    search_health_max_failures: int | None = Field(default=None, ge=1)
    search_health_suspend_seconds: float | None = Field(default=None, ge=0)
    chromium_path: str = "/usr/bin/chromium"

    @property
    def embedded(self) -> bool:
        return not self.broker_url
