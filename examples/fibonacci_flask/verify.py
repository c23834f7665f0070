"""The twelve acceptance tests of the Fibonacci service, run in the run's workspace.

They import the generated app.py and use Flask's test client (no server, no port). The last line
of the output is the structured report of bantam.runs.testing, which keep_best reads.
"""
import os
import sys

sys.path.insert(0, os.getcwd())  # the workspace, where app.py is

from bantam.runs.testing import run_tests  # noqa: E402

_client = None


def client():
    global _client
    if _client is None:
        import app  # a broken app.py fails every test with the same, readable error
        _client = app.app.test_client()
    return _client


def fib(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def get(path):
    response = client().get(path)
    return response.status_code, response.get_json(silent=True)


def answers(path, want):
    """A failure says what came back beside what was due, as a developer would want to read it."""
    got = get(path)
    assert got == want, f"GET {path} answered {got}, expected {want}"


def bad_request(path):
    status, body = get(path)
    why = " (no route took the path)" if status == 404 else ""
    assert status == 400 and "error" in (body or {}), \
        f"GET {path} answered {status}{why} {str(body)[:60]}, expected 400 with an error"


def test_health_status():
    assert get("/health")[0] == 200


def test_health_body():
    assert get("/health")[1] == {"status": "ok"}, get("/health")[1]


def test_fibonacci_0():
    answers("/fibonacci/0", (200, {"n": 0, "value": 0}))


def test_fibonacci_1():
    answers("/fibonacci/1", (200, {"n": 1, "value": 1}))


def test_fibonacci_10():
    answers("/fibonacci/10", (200, {"n": 10, "value": 55}))


def test_fibonacci_1000():
    status, body = get("/fibonacci/1000")
    value = (body or {}).get("value")
    shown = f"F({next((k for k in (999, 1001) if value == fib(k)), '?')})" if value != fib(1000) else "F(1000)"
    assert status == 200 and value == fib(1000), f"GET /fibonacci/1000 answered {status} with value {shown}, expected F(1000)"


def test_json_content_type():
    assert client().get("/fibonacci/5").headers["Content-Type"].startswith("application/json")


def test_not_a_number_is_400():
    bad_request("/fibonacci/abc")


def test_fraction_is_400():
    bad_request("/fibonacci/1.5")


def test_negative_is_400():
    bad_request("/fibonacci/-1")


def test_too_large_is_400():
    bad_request("/fibonacci/1001")


def test_post_is_405():
    assert client().post("/fibonacci/5").status_code == 405


TESTS = [test_health_status, test_health_body, test_fibonacci_0, test_fibonacci_1, test_fibonacci_10,
         test_fibonacci_1000, test_json_content_type, test_not_a_number_is_400, test_fraction_is_400,
         test_negative_is_400, test_too_large_is_400, test_post_is_405]

if __name__ == "__main__":
    try:
        import flask  # noqa: F401
    except ImportError:
        print(f"flask is not installed for {sys.executable}: pip install flask")
        raise SystemExit(2)
    raise SystemExit(run_tests(TESTS))
