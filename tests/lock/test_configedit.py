"""`fetchproxy config add`: values added to fetchproxy.toml, every comment and byte kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from fetchproxy.cli import main
from fetchproxy.lock.config import ConfigError, load_config
from fetchproxy.lock.configedit import add_values, setting_named
from tests.support.cli import run_command

WRITTEN_BY_HAND = """\
# Our project's fetchproxy settings.
[fetchproxy]
secret-params = ["session"]  # the CDN's signed links

# [record] is where origins go
[record]
headers = [
    "etag",  # our clients revalidate
]
"""


def test_a_value_is_added_and_everything_else_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "fetchproxy.toml"
    path.write_text(WRITTEN_BY_HAND)
    assert add_values(path, setting_named("record.allow"), ["files.example.org"]) == [
        "files.example.org"
    ]
    text = path.read_text()
    assert text.startswith(WRITTEN_BY_HAND.rstrip("\n"))  # nothing above it moved
    assert load_config(path).allow == ("files.example.org",)
    assert add_values(path, setting_named("record.headers"), ["link", "etag"]) == ["link"]
    text = path.read_text()
    assert "# the CDN's signed links" in text
    assert '"etag",  # our clients revalidate' in text
    assert load_config(path).headers == ("etag", "link")


def test_a_missing_file_is_made_and_a_value_there_already_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "fetchproxy.toml"
    assert add_values(path, setting_named("sandbox.writable"), ["~/.cache/pip"]) == ["~/.cache/pip"]
    assert path.read_text() == '[sandbox]\nwritable = ["~/.cache/pip"]\n'
    before = path.stat()
    assert add_values(path, setting_named("sandbox.writable"), ["~/.cache/pip"]) == []
    assert path.stat().st_mtime_ns == before.st_mtime_ns
    assert path.stat().st_ino == before.st_ino


def test_a_value_the_loader_refuses_is_never_written(tmp_path: Path) -> None:
    path = tmp_path / "fetchproxy.toml"
    path.write_text(WRITTEN_BY_HAND)
    with pytest.raises(ConfigError, match=r"fetchproxy.toml:\d+: record.headers: 'set-cookie'"):
        add_values(path, setting_named("record.headers"), ["set-cookie"])
    assert path.read_text() == WRITTEN_BY_HAND


def test_a_file_every_run_refuses_is_not_edited(tmp_path: Path) -> None:
    path = tmp_path / "fetchproxy.toml"
    path.write_text("[record]\nalow = []\n")
    with pytest.raises(ConfigError, match=r"fetchproxy.toml:2: record.alow: unknown setting"):
        add_values(path, setting_named("record.allow"), ["files.example.org"])
    assert path.read_text() == "[record]\nalow = []\n"


def test_an_unknown_setting_lists_the_settings() -> None:
    settings = r"the settings are fetchproxy\.secret-params, fetchproxy\.accept-selects-nothing, "
    with pytest.raises(ConfigError, match=settings + "record"):
        setting_named("record.alow")


def test_the_command_names_the_file_and_exits_2_on_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = tmp_path / "ci" / "app.lock.toml"
    lock.parent.mkdir()
    assert run_command("config", "add", "--lock", str(lock), "record.allow", "a.example") == 0
    out = capsys.readouterr().out
    assert out == f"{lock.parent / 'fetchproxy.toml'}: record.allow += a.example\n"
    assert main(["config", "add", "--lock", str(lock), "record.allow", "*.10.0.0.1"]) == 2
    err = capsys.readouterr().err
    assert "fetchproxy: error: record.allow: origin pattern '*.10.0.0.1': *. goes with names" in err
    assert load_config(lock.parent / "fetchproxy.toml").allow == ("a.example",)


def test_a_file_that_cannot_be_written_is_said(tmp_path: Path) -> None:
    path = tmp_path / "no-such-directory" / "fetchproxy.toml"
    with pytest.raises(OSError, match=r"cannot write .*no-such-directory/fetchproxy.toml"):
        add_values(path, setting_named("record.allow"), ["x.example"])
    assert not path.parent.exists()


def test_a_setting_of_one_value_is_set_once_and_never_replaced_silently(tmp_path: Path) -> None:
    path = tmp_path / "fetchproxy.toml"
    remote = setting_named("store.remote")
    assert add_values(path, remote, ["s3://team-bucket/fetchproxy"]) == [
        "s3://team-bucket/fetchproxy"
    ]
    assert path.read_text() == '[store]\nremote = "s3://team-bucket/fetchproxy"\n'
    assert add_values(path, remote, ["s3://team-bucket/fetchproxy"]) == []
    with pytest.raises(ConfigError, match="is already 's3://team-bucket/fetchproxy'"):
        add_values(path, remote, ["s3://other/x"])
    with pytest.raises(ConfigError, match="holds one value"):
        add_values(path, remote, ["s3://a/b", "s3://c/d"])
    assert path.read_text() == '[store]\nremote = "s3://team-bucket/fetchproxy"\n'
