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


def bad_request(path):
    status, body = get(path)
    assert status == 400 and "error" in (body or {}), f"{path}: {status} {str(body)[:60]}"


def test_health_status():
    assert get("/health")[0] == 200


def test_health_body():
    assert get("/health")[1] == {"status": "ok"}, get("/health")[1]


def test_fibonacci_0():
    assert get("/fibonacci/0") == (200, {"n": 0, "value": 0})


def test_fibonacci_1():
    assert get("/fibonacci/1") == (200, {"n": 1, "value": 1})


def test_fibonacci_10():
    assert get("/fibonacci/10") == (200, {"n": 10, "value": 55})


def test_fibonacci_1000():
    status, body = get("/fibonacci/1000")
    assert status == 200 and body["value"] == fib(1000), (status, str(body)[:80])


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
