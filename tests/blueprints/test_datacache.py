"""The parse cache of the catalog data files (blueprints/datacache.py): a hit returns exactly what a
fresh parse returns, any change of the inputs is a miss, and a broken or planted entry is never
trusted (and never executed)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from blueprints import datacache
from blueprints.catalog import CATALOG_FILES, _data_files, _load_catalog_files
from blueprints.datacache import cache_key, parse_yaml, parsed_yaml_files


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("CLUSTERFORGE_CACHE_DIR", str(d))
    monkeypatch.delenv("CLUSTERFORGE_NO_CACHE", raising=False)
    return d


def _count_parses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    real = datacache.parse_yaml

    def counting(blob: bytes) -> object:
        calls[0] += 1
        return real(blob)

    monkeypatch.setattr(datacache, "parse_yaml", counting)
    return calls


def test_a_hit_returns_what_a_fresh_parse_of_the_catalog_returns(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = _data_files(CATALOG_FILES)
    fresh = {name: parse_yaml(blob) for name, blob in files.items()}
    calls = _count_parses(monkeypatch)
    assert _load_catalog_files() == fresh  # miss: parsed, stored
    assert calls[0] == len(CATALOG_FILES)
    assert (cache / "catalog.pickle").is_file()
    again = _load_catalog_files()
    assert calls[0] == len(CATALOG_FILES)  # hit: nothing parsed
    assert again == fresh
    assert list(again) == list(CATALOG_FILES)
    assert [list(v) for v in again.values()] == [list(v) for v in fresh.values()]  # key order kept


@pytest.mark.parametrize("change", ["edit-one-byte", "append", "rename", "reorder", "drop-one"])
def test_any_change_of_the_inputs_is_a_miss(cache: Path, monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    files = {"a.yaml": b"x: 1\nwhen: 2024-05-01\n", "b.yaml": b"y: [1, 2]\n"}
    assert parsed_yaml_files("t", files) == {"a.yaml": {"x": 1, "when": __import__("datetime").date(2024, 5, 1)},
                                              "b.yaml": {"y": [1, 2]}}
    changed = {
        "edit-one-byte": {"a.yaml": b"x: 3\nwhen: 2024-05-01\n", "b.yaml": b"y: [1, 2]\n"},
        "append": {"a.yaml": b"x: 1\nwhen: 2024-05-01\nz: 0\n", "b.yaml": b"y: [1, 2]\n"},
        "rename": {"c.yaml": b"x: 1\nwhen: 2024-05-01\n", "b.yaml": b"y: [1, 2]\n"},
        "reorder": {"b.yaml": b"y: [1, 2]\n", "a.yaml": b"x: 1\nwhen: 2024-05-01\n"},
        "drop-one": {"a.yaml": b"x: 1\nwhen: 2024-05-01\n"},
    }[change]
    calls = _count_parses(monkeypatch)
    assert parsed_yaml_files("t", changed) == {name: parse_yaml(blob) for name, blob in changed.items()}
    assert calls[0] == len(changed)
    assert cache_key(changed) != cache_key(files)


def test_the_key_covers_the_parser(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import yaml

    files = {"a.yaml": b"x: 1\n"}
    before = cache_key(files)
    monkeypatch.setattr(yaml, "__version__", "0.0-other")
    assert cache_key(files) != before


@pytest.mark.parametrize("content", [b"", b"garbage", b"\x80\x05K\x01.", "truncated"])
def test_a_corrupt_entry_is_parsed_again_and_replaced(cache: Path, content: bytes | str) -> None:
    files = {"a.yaml": b"x: 1\n"}
    parsed_yaml_files("t", files)
    entry = cache / "t.pickle"
    entry.write_bytes(entry.read_bytes()[:20] if content == "truncated" else content)  # type: ignore[arg-type]
    assert parsed_yaml_files("t", files) == {"a.yaml": {"x": 1}}
    key, data = pickle.loads(entry.read_bytes())
    assert key == cache_key(files) and data == {"a.yaml": {"x": 1}}


class _Boom:
    def __reduce__(self) -> tuple[object, tuple[str]]:  # pickles as a call of print(): a safe reader refuses it
        return (print, ("EXECUTED",))


def test_a_planted_entry_is_never_executed(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = {"a.yaml": b"x: 1\n"}
    cache.mkdir(parents=True)
    (cache / "t.pickle").write_bytes(pickle.dumps((cache_key(files), {"a.yaml": _Boom()})))
    assert parsed_yaml_files("t", files) == {"a.yaml": {"x": 1}}
    assert "EXECUTED" not in capsys.readouterr().out


def test_an_entry_with_the_right_key_but_other_files_is_not_used(cache: Path) -> None:
    files = {"a.yaml": b"x: 1\n"}
    cache.mkdir(parents=True)
    (cache / "t.pickle").write_bytes(pickle.dumps((cache_key(files), {"other.yaml": {"x": 2}})))
    assert parsed_yaml_files("t", files) == {"a.yaml": {"x": 1}}


def test_an_unwritable_cache_directory_only_costs_the_parse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("CLUSTERFORGE_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.delenv("CLUSTERFORGE_NO_CACHE", raising=False)
    assert parsed_yaml_files("t", {"a.yaml": b"x: 1\n"}) == {"a.yaml": {"x": 1}}


def test_no_cache_writes_nothing(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLUSTERFORGE_NO_CACHE", "1")
    assert parsed_yaml_files("t", {"a.yaml": b"x: 1\n"}) == {"a.yaml": {"x": 1}}
    assert not cache.exists()


def test_the_default_directory_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CLUSTERFORGE_CACHE_DIR", raising=False)
    monkeypatch.delenv("CLUSTERFORGE_NO_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert datacache.cache_dir() == tmp_path / "xdg" / "clusterforge"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")  # the spec: relative paths are invalid
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert datacache.cache_dir() == tmp_path / "home" / ".cache" / "clusterforge"


def test_line_ends_are_read_as_in_a_text_file(cache: Path) -> None:
    assert parsed_yaml_files("t", {"a.yaml": b"x: |\r\n  one\r\n  two\r\n"}) == {"a.yaml": {"x": "one\ntwo\n"}}
