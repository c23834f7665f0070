"""Path confinement: the one function the run tools and the web viewer keep paths in with."""
import os

import pytest

from bantam.errors import Refused
from bantam.fsutil import JsonlLog, confine, open_confined, read_up_to


def test_confine_refuses_every_way_out(tmp_path):
    root = (tmp_path / "ws").resolve()
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("inside\n")
    (tmp_path / "secret.txt").write_text("outside\n")
    os.symlink(tmp_path / "secret.txt", root / "out")
    os.symlink(tmp_path, root / "sub" / "up")
    os.symlink(root / "a.txt", root / "alias")
    for path, reason in [("", "non-empty"), ("a\0b", "non-empty"), (None, "non-empty"),
                         (str(root / "a.txt"), "absolute"), ("../secret.txt", "'..'"),
                         ("sub/../a.txt", "'..'"), ("out", "resolves outside"),
                         ("sub/up/secret.txt", "resolves outside")]:
        with pytest.raises(Refused, match=reason) as e:
            confine(root, path)
        assert e.value.status == 403
        with pytest.raises(Refused):
            open_confined(root, path)
    assert confine(root, "alias") == root / "a.txt"  # a link that stays inside is followed
    assert confine(root, "new/file.txt") == root / "new" / "file.txt"  # need not exist yet
    with os.fdopen(open_confined(root, "alias"), "rb") as f:
        assert f.read() == b"inside\n"
    with pytest.raises(Refused, match="No such file") as e:
        open_confined(root, "missing.txt")
    assert e.value.status == 404


@pytest.mark.parametrize("size", [0, 1, 100, (1 << 16) + 5, (3 << 20) + 7])
def test_read_up_to_returns_what_read_n_returns(tmp_path, size):
    data = os.urandom(size)
    (tmp_path / "f").write_bytes(data)
    for n in (0, 1, size - 1, size, size + 1, 1 << 30):
        if n < 0:
            continue
        for buffering in (-1, 0):
            with open(tmp_path / "f", "rb", buffering=buffering) as f:
                assert read_up_to(f, n) == data[:n]
    r, w = os.pipe()  # no size to go by: read in chunks until the end
    os.write(w, b"x" * 1000)
    os.close(w)
    with open(r, "rb") as f:
        assert read_up_to(f, 600) == b"x" * 600 and read_up_to(f, 10_000) == b"x" * 400


def test_a_bounded_read_of_a_small_file_does_not_take_the_bound_in_memory(tmp_path):
    # a buffered read(n) allocates n first: with logs bounded at 1 GiB, every read of a small
    # thread file mapped and unmapped 1 GiB (a stall for every thread of a batch)
    import tracemalloc
    log = JsonlLog(tmp_path / "t.jsonl")
    log.sync([{"role": "user", "content": "hi"}])
    tracemalloc.start()
    try:
        assert log.read() == [{"role": "user", "content": "hi"}]
        (tmp_path / "big").write_bytes(b"y" * 1000)
        with open(tmp_path / "big", "rb") as f:
            assert len(read_up_to(f, 1 << 30)) == 1000
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak
