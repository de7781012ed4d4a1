"""``ToolSpec``: one tool's declaration — name, schema, capabilities, gating and body (SPEC S-1, K-4, K-5).

Built-in tools declare a pydantic ``Params`` model (``extra="forbid"``); its Draft 2020-12 JSON
Schema is generated once and cached, and validation runs the model in strict mode, which accepts
exactly what the generated schema accepts. A tool on the CLI's one-call path (``read``, ``ls``)
names its model by import path instead (``DeferredParams``) and adds a dependency-free ``quick``
validator for ordinary arguments: pydantic is ~110 ms of start-up (issue 13 item 7), loaded only
when the schema is asked for or ``quick`` leaves the arguments to the model. Host tools registered
with a raw JSON Schema are validated by a cached ``jsonschema`` validator whose patterns are
matched by RE2 in linear time (``kernel.schema_patterns``: a schema may come from a hostile MCP
server) and whose references must be local and resolve, checked at registration and never fetched
(``kernel.schema_refs``). Either way a failure is ``invalid_argument`` whose message names the failing JSON path
(``/files/0/limit: …`` or ``$: …``), at most 8 errors.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from kernel.capabilities import ToolCapabilities
from kernel.errors import InvalidArgument
from kernel.schema_patterns import check_patterns
from kernel.schema_refs import ref_validator
from kernel.schema_steps import bounded_errors

if TYPE_CHECKING:
    import jsonschema
    from pydantic import BaseModel, ValidationError

    from kernel.context import ToolContext
    from kernel.result import ToolResult

MAX_VALIDATION_ERRORS = 8
MAX_VALIDATION_MESSAGE_BYTES = 4096
MAX_SCHEMA_BYTES = 256 * 1024
TOOL_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,127}$")

RunFn = Callable[["ToolContext", Any], Awaitable["ToolResult | str"]]
SubjectFn = Callable[[Any], "str | Sequence[str] | None"]
SubjectKind = Literal["value", "path", "command"]
CapabilitiesFn = Callable[[Any], ToolCapabilities]


def _conservative(_params: Any) -> ToolCapabilities:
    return ToolCapabilities.conservative()


def _never(_params: Any) -> bool:
    return False


def _no_subject(_params: Any) -> str | None:
    return None


@dataclass(frozen=True)
class DeferredParams:
    """A pydantic ``Params`` model named by ``"module:attribute"`` and imported on first need, and a
    validator that needs no import at all.

    ``quick(args)`` returns the parameters — an object with the model's attribute names and, field by
    field, the values the model would give — or ``None`` to leave the arguments to the model, which
    then accepts them or words the error. It may leave anything unusual to the model; it must never
    accept what the model refuses (``tests/kernel/test_quick_params.py`` holds each ``quick`` to
    its model on generated arguments)."""

    model: str
    quick: Callable[[dict[str, Any]], Any]

    def load(self) -> type[BaseModel]:
        module, _, attribute = self.model.partition(":")
        loaded: type[BaseModel] = getattr(importlib.import_module(module), attribute or "Params")
        return loaded


@dataclass(frozen=True, eq=False)
class ToolSpec:
    """A tool. ``params`` (pydantic) or ``parameters`` (raw JSON Schema) describes its arguments.

    ``subject`` gives the string(s) a permission rule specifier is matched against, and
    ``subject_kind`` says how the kernel reads them: ``"path"`` — workspace paths, matched after the
    workspace resolver (lexical and physical forms; every path must pass); ``"command"`` — a bash
    line, matched per command it runs (``kernel.shell_commands``); ``"value"`` — as given (the host
    for web tools, the mode for ``search``). Several strings: every one must pass.
    ``orchestrator`` tools (``batch``, ``program``, workflows) make nested calls; only when they are
    also ``builtin`` can their children inherit host-direct trust. ``spends_beyond_call`` says whether
    one call may spend more of the budget than itself (an ``orchestrator`` tool, or ``delegates``).
    """

    name: str
    description: str
    run: RunFn
    params: type[BaseModel] | DeferredParams | None = None
    parameters: dict[str, Any] | None = None
    capabilities: CapabilitiesFn = _conservative
    requires: frozenset[str] = frozenset()
    visible: bool = True
    orchestrator: bool = False
    # Spends more of the session's budget than the call itself besides nested calls (which every
    # ``orchestrator`` tool makes): child runs (``task``), model requests (``generate_object``).
    delegates: bool = False
    timeout_ms: int | None = None
    requires_confirmation: Callable[[Any], bool] = _never
    subject: SubjectFn = _no_subject
    subject_kind: SubjectKind = "value"
    path_fields: tuple[str, ...] = ()
    trust: str = "workspace_data"
    examples: tuple[dict[str, Any], ...] = ()
    builtin: bool = field(default=False)
    # How the call's arguments appear in session events (``tool_start``): a tool whose arguments
    # may carry secrets (signed URLs for download/web_fetch) shows a redacted copy. The tool itself
    # always receives the real arguments.
    event_args: Callable[[Any], Any] | None = None
    # A synchronous body equivalent to ``run`` that the kernel may call on the thread of a synchronous
    # trusted host-direct caller (``Kernel.invoke_host_inline``): a plain host-tool handler. It gets
    # the validated parameters only (no context) and returns what ``run`` would.
    run_inline: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        if not TOOL_NAME_RE.match(self.name):
            raise ValueError(f"invalid tool name {self.name!r}")
        if (self.params is None) == (self.parameters is None):
            raise ValueError(f"tool {self.name!r} needs exactly one of params= or parameters=")
        if self.params is not None and not isinstance(self.params, DeferredParams):
            _ = self.params_model  # checked now; a deferred model is checked when it loads
        if self.parameters is not None:
            # A raw schema is the host's input: build (and so check) it now, so a bad one fails at
            # registration. A pydantic model's schema is generated on first use and cached per
            # model class (``Registry.register`` forces it for dynamic tools): building a session
            # — and so CLI start-up — no longer generates every built-in's schema (issue 13 item 7).
            _ = self.json_schema
            _ = self._validator

    @property
    def spends_beyond_call(self) -> bool:
        return self.orchestrator or self.delegates

    @cached_property
    def params_model(self) -> type[BaseModel] | None:
        """The pydantic model of the arguments (imported now if it was deferred), checked."""
        params = self.params
        model = params.load() if isinstance(params, DeferredParams) else params
        if model is not None and model.model_config.get("extra") != "forbid":
            raise ValueError(f"tool {self.name!r}: Params must set extra='forbid'")
        return model

    @cached_property
    def json_schema(self) -> dict[str, Any]:
        model = self.params_model
        if model is not None:
            # A top-level copy (``examples`` is added below); nested parts are shared with every spec of
            # the same params class and, like the whole schema, never mutated.
            schema = dict(_params_schema(model))
        else:
            assert self.parameters is not None
            schema = dict(self.parameters)
            schema.setdefault("type", "object")
        if self.examples:
            schema["examples"] = list(self.examples)
        return schema

    @cached_property
    def _validator(self) -> jsonschema.protocols.Validator | None:
        if self.params is not None:
            return None
        import json

        if len(json.dumps(self.json_schema)) > MAX_SCHEMA_BYTES:
            raise ValueError(f"tool {self.name!r}: schema is larger than {MAX_SCHEMA_BYTES} bytes")
        cls = validator_class(self.json_schema)
        cls.check_schema(self.json_schema)
        check_patterns(self.json_schema)  # a pattern RE2 cannot match in linear time refuses the tool
        # Every $ref local and resolvable, crawled once; nothing is ever fetched (RefRefused otherwise).
        validator: jsonschema.protocols.Validator = ref_validator(cls, self.json_schema)
        return validator

    @cached_property
    def _accepts_any_object(self) -> bool:
        """A raw schema that only says "an object" (plus annotations): every dict is valid, so the
        per-call validator run (~15 µs) is skipped. Anything else is validated by jsonschema."""
        schema = self.json_schema
        return schema.get("type") == "object" and set(schema) <= _ANNOTATION_ONLY_KEYS

    def definition(self) -> dict[str, Any]:
        """What the model sees: name, description, JSON Schema."""
        return {"name": self.name, "description": self.description, "parameters": self.json_schema}

    def validate(self, args: Any) -> Any:
        """Validated parameters: a model instance, what a ``quick`` validator gives (the same
        attributes), or the dict for raw-schema tools."""
        if not isinstance(args, dict):
            raise InvalidArgument(f"$: arguments must be a JSON object, got {type(args).__name__}")
        if isinstance(self.params, DeferredParams):
            quick = self.params.quick(args)
            if quick is not None:
                return quick
        model = self.params_model
        if model is not None:
            from pydantic import ValidationError  # loaded with the model

            try:
                return model.model_validate(args, strict=True)
            except ValidationError as exc:
                raise _pydantic_error(self.name, exc) from None
        if self._accepts_any_object:
            return args
        validator = self._validator
        assert validator is not None
        # Within a step budget linear in the arguments: a schema's $ref tree can be exponential.
        errors = sorted(bounded_errors(validator, args), key=lambda e: list(e.absolute_path))
        if errors:
            lines = [
                f"{_pointer(list(e.absolute_path))}: {e.message}" for e in errors[:MAX_VALIDATION_ERRORS]
            ]
            raise _invalid(self.name, lines)
        return args


# Keywords that constrain nothing (besides "type"): a schema made only of these accepts any object.
_ANNOTATION_ONLY_KEYS = frozenset(
    {"type", "title", "description", "$schema", "$id", "$comment", "examples", "default", "deprecated"}
)


@functools.lru_cache(maxsize=1024)
def _params_schema(params: type[BaseModel]) -> dict[str, Any]:
    """A pydantic model's generated schema, once per model class: every session builds its registry
    from the same specs (copies, with ``dataclasses.replace``), and generating a schema costs ~0.5 ms
    — most of a session's build time before this cache. Read-only: callers copy what they change."""
    schema = params.model_json_schema()
    schema.setdefault("additionalProperties", False)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema


# $schema URI (no scheme, no trailing #) → jsonschema's validator class name. jsonschema is imported on
# the first host-tool validation, not with the kernel (it is a large import: CLI start-up, item 7).
_DRAFTS: dict[str, str] = {
    "json-schema.org/draft-04/schema": "Draft4Validator",
    "json-schema.org/draft-06/schema": "Draft6Validator",
    "json-schema.org/draft-07/schema": "Draft7Validator",
    "json-schema.org/draft/2019-09/schema": "Draft201909Validator",
    "json-schema.org/draft/2020-12/schema": "Draft202012Validator",
}


def validator_class(schema: dict[str, Any]) -> Any:
    """Draft 2020-12, unless ``$schema`` names another known draft (MCP servers often emit draft-07)."""
    import jsonschema

    uri = schema.get("$schema")
    name = "Draft202012Validator"
    if isinstance(uri, str):
        name = _DRAFTS.get(uri.split("://", 1)[-1].rstrip("#"), name)
    return getattr(jsonschema, name)


def _pointer(path: list[Any]) -> str:
    if not path:
        return "$"
    return "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _pydantic_error(tool: str, exc: ValidationError) -> InvalidArgument:
    lines = []
    for err in exc.errors(include_url=False)[:MAX_VALIDATION_ERRORS]:
        loc = [p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-"))]
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "additional property is not allowed"
        elif err["type"] == "missing":
            msg = "required property is missing"
        lines.append(f"{_pointer(loc)}: {msg}")
    return _invalid(tool, lines)


def _invalid(tool: str, lines: list[str]) -> InvalidArgument:
    text = f"Invalid arguments for tool '{tool}': " + "; ".join(lines)
    encoded = text.encode("utf-8")
    if len(encoded) > MAX_VALIDATION_MESSAGE_BYTES:
        text = encoded[:MAX_VALIDATION_MESSAGE_BYTES].decode("utf-8", "ignore") + "…"
    return InvalidArgument(text, errors=[line.split(": ", 1)[0] for line in lines])
