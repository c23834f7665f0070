"""Every server fault in every mode that talks to a model, on both wire formats (tests/reliability.py)."""
import pytest

from tests.reliability import cases, run_case

FAST = {"oneshot", "thread"}  # the terminal and sub-agent cases are slower; CI runs them too


@pytest.mark.parametrize("name,mode,wire", [
    pytest.param(f, m, w, marks=() if m in FAST and w == "openai" else pytest.mark.slow) for f, m, w in cases()])
def test_fault(tmp_path, name, mode, wire):
    problem = run_case(name, mode, wire, tmp_path)
    assert problem is None, problem
    for path in (tmp_path / "home").rglob("*"):  # no secret on disk, whatever happened
        if path.is_file():
            assert "sk-reliability-secret-1234" not in path.read_text(errors="replace"), path
