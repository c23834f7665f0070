"""Path confinement: the one function the run tools and the web viewer keep paths in with."""
import os

import pytest

from bantam.errors import Refused
from bantam.fsutil import confine, open_confined


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
