"""unframe.cache: answers kept between processes, and every way the folder can be wrong."""

from __future__ import annotations

from pathlib import Path

from unframe import cache


def test_where_the_cache_lives(monkeypatch, tmp_path):
    monkeypatch.setenv("UNFRAME_CACHE_DIR", str(tmp_path / "c"))
    assert cache.directory() == tmp_path / "c"
    monkeypatch.setenv("UNFRAME_CACHE_DIR", "off")
    assert cache.directory() is None and cache.DigestSet("x").path is None
    monkeypatch.delenv("UNFRAME_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.directory() == tmp_path / "xdg" / "unframe"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache.directory() == Path.home() / ".cache" / "unframe"


def test_a_digest_set_round_trips_and_skips_what_is_not_a_digest(monkeypatch, tmp_path):
    monkeypatch.setenv("UNFRAME_CACHE_DIR", str(tmp_path))
    kept = cache.DigestSet("openvino 2026/cpu")  # a name made safe for a file
    assert kept.path is not None and kept.path.parent == tmp_path and "/" not in kept.path.name
    assert kept.load() == set()
    a, b = cache.digest(("Convolution", "opset1", b"\x01")), cache.digest(("Relu", "opset1"))
    assert a != b and a == cache.digest(("Convolution", "opset1", b"\x01"))
    kept.add([a, "not a digest", a])
    kept.add([b])
    assert kept.load() == {a, b}
    assert kept.path.read_text().count("\n") == 2
    with open(kept.path, "a") as fh:
        fh.write("garbage\n" + "f" * 31 + "\n")
    assert kept.load() == {a, b}


def test_a_set_past_its_size_starts_over(monkeypatch, tmp_path):
    monkeypatch.setenv("UNFRAME_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cache, "MAX_LINES", 3)
    kept = cache.DigestSet("s")
    digests = [cache.digest(i) for i in range(6)]
    kept.add(digests[:4])
    kept.add(digests[4:5])
    assert kept.load() == {digests[4]}


def test_an_unwritable_cache_is_ignored(monkeypatch, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("UNFRAME_CACHE_DIR", str(blocker / "sub"))  # a folder under a file: no one can make it
    kept = cache.DigestSet("s")
    kept.add([cache.digest(1)])  # no error
    assert kept.load() == set() and blocker.read_text() == ""


def test_the_machine_id_is_stable():
    assert cache.machine_id() == cache.machine_id() and len(cache.machine_id()) == 12
