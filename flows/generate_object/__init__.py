"""``generate_object``: schema-validated structured output with repair (SPEC G-1..G-6)."""

from flows.generate_object.generate import Outcome, choose_mode, generate
from flows.generate_object.params import Params
from flows.generate_object.tool import generate_object_tool, usage_json

__all__ = ["Outcome", "Params", "choose_mode", "generate", "generate_object_tool", "usage_json"]
