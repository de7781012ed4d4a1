"""The batch job file and the results file (SPEC A-5; issue 9 item 4).

The job file is validated whole before anything runs (an error names the line); results are appended
and flushed per line; a rerun picks exactly the jobs whose latest result did not succeed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel.errors import InvalidArgument
from orchestrator.batch_file import ResultsWriter, latest_results, load_jobs, pending_jobs, result_line


def jobs_file(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "jobs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a5_valid_jobs(tmp_path: Path) -> None:
    path = jobs_file(
        tmp_path,
        json.dumps({"id": "a", "prompt": "p1"}),
        "",
        json.dumps(
            {
                "id": "b",
                "prompt": "p2",
                "agent": "explore",
                "model": "openai:m",
                "max_steps": 3,
                "workspace": "ws",
                "output_schema": {"type": "object"},
            }
        ),
    )
    jobs = load_jobs(path)
    assert [(j.id, j.line) for j in jobs] == [("a", 1), ("b", 3)]
    assert jobs[1].spec.max_steps == 3 and jobs[1].spec.output_schema == {"type": "object"}


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("{not json", "not valid JSON"),
        ("[1]", "a job must be a JSON object"),
        ('{"prompt": "p"}', "id: required"),
        ('{"id": "x"}', "prompt: required"),
        ('{"id": 7, "prompt": "p"}', "id: Input should be a valid string"),
        ('{"id": "x", "prompt": "p", "extra": 1}', "extra: unknown key"),
        ('{"id": "x", "prompt": "  "}', "prompt: must not be blank"),
        ('{"id": "x", "prompt": "p", "max_steps": 0}', "max_steps"),
        ('{"id": "x", "prompt": "p", "model": "gpt4"}', "model"),
        ('{"id": "x", "prompt": "p", "agent": "../a"}', "agent"),
        ('{"id": "x", "prompt": "p", "output_schema": {"type": 3}}', "output_schema"),
    ],
)
def test_a5_a_bad_line_is_one_error_naming_the_line(tmp_path: Path, line: str, why: str) -> None:
    path = jobs_file(tmp_path, json.dumps({"id": "ok", "prompt": "p"}), line)
    with pytest.raises(InvalidArgument) as info:
        load_jobs(path)
    assert info.value.message.startswith(f"{path}:2: ") and why in info.value.message


def test_a5_a_duplicate_id_names_both_lines(tmp_path: Path) -> None:
    path = jobs_file(
        tmp_path, '{"id": "a", "prompt": "p"}', '{"id": "b", "prompt": "p"}', '{"id": "a", "prompt": "q"}'
    )
    with pytest.raises(InvalidArgument) as info:
        load_jobs(path)
    assert info.value.message == f"{path}:3: duplicate id 'a' (first on line 1)"


def test_a5_empty_or_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="holds no jobs"):
        load_jobs(jobs_file(tmp_path, "", ""))
    with pytest.raises(InvalidArgument, match="cannot read the job file"):
        load_jobs(tmp_path / "missing.jsonl")


def test_a5_results_are_appended_and_the_latest_per_id_wins(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    with ResultsWriter(out) as w:
        w.write(
            result_line(
                "a",
                success=False,
                text="",
                usage={},
                duration_ms=1,
                session_id="s1",
                error={"type": "transport", "op": "model"},
            )
        )
        w.write(
            result_line(
                "b",
                success=True,
                text="B",
                usage={"total_tokens": 3},
                duration_ms=2,
                session_id="s2",
                structured={"n": 1},
                has_structured=True,
            )
        )
        # flushed per line: another reader sees both lines before close
        assert len(out.read_text().splitlines()) == 2
    with ResultsWriter(out) as w:
        w.write(result_line("a", success=True, text="A", usage={}, duration_ms=3, session_id="s3"))
    latest = latest_results(out)
    assert latest["a"]["text"] == "A" and latest["b"]["structured"] == {"n": 1}
    row = json.loads(out.read_text().splitlines()[0])
    assert list(row) == ["id", "success", "text", "error", "usage", "duration_ms", "session_id"]


def test_a5_a_rerun_runs_only_jobs_whose_latest_result_did_not_succeed(tmp_path: Path) -> None:
    path = jobs_file(tmp_path, *(json.dumps({"id": i, "prompt": "p"}) for i in ("a", "b", "c", "d")))
    out = tmp_path / "results.jsonl"
    with ResultsWriter(out) as w:
        w.write(result_line("a", success=True, text="", usage={}, duration_ms=0, session_id=""))
        w.write(result_line("b", success=False, text="", usage={}, duration_ms=0, session_id=""))
        w.write(result_line("c", success=True, text="", usage={}, duration_ms=0, session_id=""))
        w.write(result_line("c", success=False, text="", usage={}, duration_ms=0, session_id=""))
    assert [j.id for j in pending_jobs(load_jobs(path), latest_results(out))] == ["b", "c", "d"]


def test_a5_a_line_torn_by_a_crash_is_cut_before_the_next_append(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    out.write_text('{"id": "a", "success": true}\n{"id": "b", "succ')
    assert set(latest_results(out)) == {"a"}
    with ResultsWriter(out) as w:
        w.write(result_line("b", success=True, text="", usage={}, duration_ms=0, session_id=""))
    lines = out.read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(line) for line in lines)
    assert set(latest_results(out)) == {"a", "b"}
