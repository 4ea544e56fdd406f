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
            "fetchproxy.toml:2: fetchproxy.secret-param: unknown setting — the settings are "
            "secret-params",
        ),
        (
            '[fetchproxy]\nsecret-params = "session"\n',
            "fetchproxy.toml:2: fetchproxy.secret-params: must be a list of parameter names, "
            'e.g. ["session", "X-Signed"]',
        ),
        (
            '[fetchproxi]\nsecret-params = ["session"]\n',
            "fetchproxy.toml:1: unknown table or key 'fetchproxi' — settings go in a "
            "[fetchproxy] table",
        ),
    ],
)
def test_errors_name_the_file_line_and_setting(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "fetchproxy.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{tmp_path}/{message}"


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
