"""What a parent sees of its children: bounded ``TaskResult``s and the typed fan-in verdict (SPEC X-3, K-8)."""

from __future__ import annotations

from flows.task.result import (
    HEAD_CHARS,
    MAX_OUTPUT_CHARS,
    MAX_SOURCE_ANCHORS,
    TAIL_CHARS,
    TaskResult,
    anchors_of,
    bound_output,
    task_outcome,
)
from kernel.errors import error_from_kind


def child(i: int, ok: bool = True, text: str = "done", **kw: object) -> TaskResult:
    return TaskResult.build(
        task_id=f"t{i}",
        index=i,
        agent="explore",
        description=f"d{i}",
        session_id=f"s{i}",
        completion="completed" if ok else "failed",
        text=text,
        error_kind=None if ok else {"type": "transport", "op": "model"},
        **kw,  # type: ignore[arg-type]
    )


def test_x3_child_output_keeps_3000_head_and_800_tail_characters() -> None:
    text = "H" * HEAD_CHARS + "x" * 10_000 + "T" * TAIL_CHARS
    bounded, omitted = bound_output(text)
    assert omitted == 10_000
    assert bounded.startswith("H" * HEAD_CHARS) and bounded.endswith("T" * TAIL_CHARS)
    assert "x" not in bounded.replace("characters", "")
    assert "[10000 characters of the child's output omitted]" in bounded
    assert len(bounded) <= MAX_OUTPUT_CHARS == 4000
    short = "é" * (HEAD_CHARS + TAIL_CHARS)
    assert bound_output(short) == (short, 0)


def test_x3_at_most_64_distinct_source_anchors_first_seen_first() -> None:
    anchors = [f"src/f{i}.py" for i in range(100)]
    result = child(0, anchors=["src/f1.py", *anchors, 7, ""])
    assert result.source_anchors[0] == "src/f1.py"
    assert len(result.source_anchors) == MAX_SOURCE_ANCHORS
    assert len(set(result.source_anchors)) == MAX_SOURCE_ANCHORS
    assert anchors_of({"source_anchors": ["a", 3], "source_anchor": "b"}) == ["a", "b"]
    assert anchors_of("not a dict") == []


def test_x3_task_result_round_trips_and_is_bounded_again_after_crossing_redis() -> None:
    r = child(3, text="ok", structured={"n": 1}, has_structured=True, steps=2)
    again = TaskResult.from_json(r.to_json())
    assert again == r
    cut = child(4, text="x" * 20_000)
    assert TaskResult.from_json(cut.to_json()).output == cut.output  # bounding is idempotent
    data = r.to_json()
    data["output"] = "z" * 50_000
    data["source_anchors"] = [f"a{i}" for i in range(500)]
    data["completion"] = "bogus"
    loose = TaskResult.from_json(data)
    assert len(loose.output) <= MAX_OUTPUT_CHARS and len(loose.source_anchors) == 64
    assert loose.completion == "failed" and loose.success is False


def test_x3_all_children_succeeded_is_a_success_with_every_output() -> None:
    result = task_outcome(
        "task",
        [child(0, text="alpha"), child(1, text="beta")],
        allow_partial_failure=False,
        min_success_count=None,
    )
    assert result.exit_code == 0
    assert "alpha" in result.output and "beta" in result.output
    assert result.metadata["fan_out"]["status"] == "complete"
    assert [t["task_id"] for t in result.metadata["tasks"]] == ["t0", "t1"]


def test_k8_a_failed_child_without_partial_failure_is_partial_failure_failed_total() -> None:
    result = task_outcome(
        "task", [child(0), child(1, ok=False), child(2)], allow_partial_failure=False, min_success_count=None
    )
    assert result.exit_code == 1
    assert {k: result.error_kind[k] for k in ("type", "failed", "total")} == {
        "type": "partial_failure",
        "failed": 1,
        "total": 3,
    }
    err = error_from_kind(result.error_kind, result.output)
    assert (err.kind, err.data["failed"], err.data["total"]) == ("partial_failure", 1, 3)


def test_x3_partial_failure_succeeds_when_enough_children_succeeded() -> None:
    kids = [child(0), child(1, ok=False), child(2, ok=False), child(3)]
    ok = task_outcome("task", kids, allow_partial_failure=True, min_success_count=2)
    assert ok.exit_code == 0
    assert ok.metadata["fan_out"]["failed_indexes"] == [1, 2]
    assert "failed indexes [1, 2]" in ok.output
    short = task_outcome("task", kids, allow_partial_failure=True, min_success_count=3)
    assert short.exit_code == 1 and short.error_kind["type"] == "partial_failure"
    none = task_outcome("task", [child(0, ok=False)], allow_partial_failure=True, min_success_count=None)
    assert none.exit_code == 1 and none.error_kind["failed"] == 1


def test_x3_aborted_children_are_typed() -> None:
    t = TaskResult.aborted(
        task_id="x", index=0, agent="general", description="d", completion="timed_out", duration_ms=50
    )
    assert t.error_kind == {"type": "timeout", "op": "task", "duration_ms": 50} and not t.success
    c = TaskResult.aborted(task_id="y", index=1, agent="general", description="d")
    assert c.completion == "cancelled" and c.error_kind == {"type": "cancelled", "op": "task"}


def test_x3_a_final_answer_nested_too_deeply_is_a_schema_problem_not_a_recursion_error() -> None:
    """A child's output_schema answer deeper than 64 levels goes to the repair turn (it raised
    RecursionError out of the child: from json.loads past ~1,000 levels, from jsonschema sooner)."""
    from flows.task.runs import structured_answer

    schema = {"type": "array", "items": {"$ref": "#"}}
    for text in ("[" * 100_000 + "]" * 100_000, "[" * 500 + "]" * 500):
        value, errors = structured_answer(text, schema)
        assert value is None and errors == ["$: the final answer nests more than 64 levels deep"]
    assert structured_answer("[[[]]]", schema) == ([[[]]], [])
