"""fetchproxy.toml: the project's extra secret parameters, and clear errors for a bad file."""

from __future__ import annotations

from pathlib import Path

import pytest

from fetchproxy.keys.url import DEFAULT_SECRET_PARAMS
from fetchproxy.lock.config import ConfigError, config_path_for, load_config, parse_config
from fetchproxy.lock.file import load_lock
from tests.support.proxy import Rig


def test_no_file_means_the_built_in_secrets(tmp_path: Path) -> None:
    config = load_config(config_path_for(tmp_path / "fetchproxy.lock.toml"))
    assert config.secret_params == DEFAULT_SECRET_PARAMS
    assert config_path_for(tmp_path / "x.lock.toml") == tmp_path / "fetchproxy.toml"


def test_project_secret_params_add_to_the_built_in_ones(tmp_path: Path) -> None:
    path = tmp_path / "fetchproxy.toml"
    config = parse_config('[fetchproxy]\nsecret-params = ["session"]\n', path=path)
    assert config.secret_params == DEFAULT_SECRET_PARAMS | {"session"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[fetchproxy]\nsecret-param = ["session"]\n',
            "fetchproxy.toml:2: fetchproxy.secret-param: unknown setting — the settings of "
            "[fetchproxy] are secret-params, accept-selects-nothing",
        ),
        (
            '[fetchproxy]\nsecret-params = "session"\n',
            "fetchproxy.toml:2: fetchproxy.secret-params: must be a list of non-empty strings, "
            'e.g. ["session", "X-Signed"]',
        ),
        (
            '[fetchproxi]\nsecret-params = ["session"]\n',
            "fetchproxy.toml:1: unknown table or key 'fetchproxi' — settings go in the tables "
            "[fetchproxy], [record], [sandbox], [store]",
        ),
        (
            '[store]\nremote = ["s3://b/p"]\n',
            "fetchproxy.toml:2: store.remote: must be a non-empty string, e.g. "
            '"s3://my-bucket/fetchproxy"',
        ),
        (
            '[store]\nremote = "s3://key:secret@bucket/p"\n',
            "fetchproxy.toml:2: store.remote: 's3://***@bucket/p' is not a remote store URL: it "
            "must not carry credentials; they come from the AWS configuration (AWS_PROFILE, "
            "AWS_ACCESS_KEY_ID, web identity, instance metadata) (for example "
            "s3://my-bucket/fetchproxy)",
        ),
        (
            '[record]\n\nallow = [\n  "files.example.org",\n  "https://files.example.org",\n]\n',
            "fetchproxy.toml:3: record.allow: origin pattern 'https://files.example.org': give "
            "host, host:port or *.domain[:port] without a scheme, user, path or query, e.g. "
            "files.example.org or *.example.net:8443",
        ),
    ],
)
def test_errors_name_the_file_line_and_setting(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "fetchproxy.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{tmp_path}/{message}"


def test_record_and_sandbox_settings(tmp_path: Path) -> None:
    path = tmp_path / "fetchproxy.toml"
    config = parse_config(
        '[record]\nallow = ["files.example.org", "*.example.net:8443"]\n'
        '[sandbox]\nwritable = ["~/.cache/pip", "build-cache", "/abs"]\n',
        path=path,
    )
    assert config.allow == ("files.example.org", "*.example.net:8443")
    assert config.writable == (Path.home() / ".cache/pip", tmp_path / "build-cache", Path("/abs"))


def test_the_remote_store(tmp_path: Path) -> None:
    path = tmp_path / "fetchproxy.toml"
    config = parse_config('[store]\nremote = "s3://my-bucket/ci/fetchproxy/"\n', path=path)
    assert config.remote is not None
    assert (config.remote.bucket, config.remote.prefix) == ("my-bucket", "ci/fetchproxy")
    assert parse_config("", path=path).remote is None


def test_an_unknown_setting_of_a_known_table_names_the_table(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config('[sandbox]\nwriteable = ["x"]\n', path=tmp_path / "fetchproxy.toml")
    assert str(info.value) == (
        f"{tmp_path}/fetchproxy.toml:2: sandbox.writeable: unknown setting — the settings of "
        "[sandbox] are writable"
    )


def test_a_project_secret_parameter_never_reaches_the_lock(rig: Rig) -> None:
    rules = parse_config(
        '[fetchproxy]\nsecret-params = ["session"]\n', path=Path("fetchproxy.toml")
    ).rules
    recorder = rig.start("record", rules=rules)
    assert rig.get(recorder, "/small.txt?session=s3ss10n-value").status == 200
    assert recorder.stop() == 0
    assert "s3ss10n-value" not in rig.paths.lock.read_text()
    assert [f.key.url for f in load_lock(rig.paths.lock).fetches] == [rig.origin.url("/small.txt")]

    replayer = rig.start("replay", rules=rules)
    assert rig.get(replayer, "/small.txt?session=another-session").status == 200
    assert replayer.stop() == 0
