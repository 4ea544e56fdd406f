"""The ``fetchproxy`` command line itself: version, help texts, and the usage errors it gives.

Usage errors are argparse's: exit status 2, the usage of the command that was given and one
``fetchproxy COMMAND: error: ...`` line on stderr.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from fetchproxy.ca import generate_ca
from fetchproxy.cli import build_parser
from tests.support.cli import parse_cli, run_fetchproxy

STORE_DEFAULT = (
    "(default: $FETCHPROXY_STORE, else $XDG_CACHE_HOME/fetchproxy/store, "
    "else ~/.cache/fetchproxy/store)"
)


def run_main(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m fetchproxy ARGS`` without the user's FETCHPROXY_ settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FETCHPROXY_")}
    return run_fetchproxy(*args, cwd=cwd, env=env)


def usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """What the real parser writes to stderr for ``argv``, which must be a usage error."""
    with pytest.raises(SystemExit) as exited:
        parse_cli(*argv)
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err


def help_text(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """``fetchproxy ARGV --help``, with runs of white space made one space."""
    with pytest.raises(SystemExit) as exited:
        parse_cli(*argv, "--help")
    assert exited.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], str | None, argparse.ArgumentParser]]:
    """Every (sub)command below ``parser``: its words, its entry in its parent's list, its
    parser. argparse offers no public way to walk its subparsers."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            listed = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield (*path, name), listed.get(name), sub
                yield from commands(sub, (*path, name))


@pytest.fixture
def ca_cert(tmp_path: Path) -> Path:
    return generate_ca("test origin CA").write(tmp_path / "ca")


# ------------------------------------------------------------------------------------ --version


def test_version_prints_the_installed_version_and_exits_0(tmp_path: Path) -> None:
    done = run_main("--version", cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        f"fetchproxy {metadata.version('fetchproxy')}\n",
        "",
    )


def test_version_is_listed_in_the_top_level_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_cli("--help")
    assert exited.value.code == 0
    assert "usage: fetchproxy [-h] [--version] COMMAND ..." in capsys.readouterr().out


# ------------------------------------------------------------------------------ path metavars


@pytest.mark.parametrize(
    ("argv", "options"),
    [
        (("record",), ("--lock PATH", "--store DIR", "--log PATH", "--upstream-ca PATH")),
        (("replay",), ("--lock PATH", "--store DIR", "--log PATH")),
        (("serve",), ("--lock PATH", "--store DIR", "--log PATH", "--upstream-ca PATH")),
        (("lock", "verify"), ("--lock PATH", "--store DIR")),
        (("lock", "fmt"), ("--lock PATH",)),
        (("lock", "recover"), ("--lock PATH",)),
        (("store", "gc"), ("--keep-lock PATH", "--store DIR")),
        (("store", "verify"), ("--store DIR",)),
        (("demo",), ("--dir DIR",)),
    ],
)
def test_path_options_are_spelled_path_or_dir(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], options: tuple[str, ...]
) -> None:
    shown = help_text(capsys, *argv)
    for option in options:
        assert f" {option} " in shown or f"[{option}]" in shown
    assert "--lock LOCK" not in shown
    assert "--log LOG" not in shown


def test_every_path_option_has_a_path_or_dir_metavar() -> None:
    for words, _listed, parser in commands(build_parser()):
        for action in parser._actions:
            takes_path = action.type is Path or action.dest == "upstream_ca"
            if takes_path and action.option_strings:
                assert action.metavar in ("PATH", "DIR"), (words, action.option_strings)


# ------------------------------------------------------------------------- the store's default


@pytest.mark.parametrize(
    "argv",
    [
        ("record",),
        ("replay",),
        ("serve",),
        ("lock", "verify"),
        ("store", "gc"),
        ("store", "verify"),
    ],
)
def test_store_help_names_every_fallback_of_the_default(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
) -> None:
    assert f"--store DIR the content-addressed store {STORE_DEFAULT}" in help_text(capsys, *argv)


# -------------------------------------------------------------------------- one-line summaries


def test_every_command_has_a_summary_in_its_parents_list_and_its_own_help() -> None:
    found = []
    for words, listed, parser in commands(build_parser()):
        found.append(" ".join(words))
        assert listed, f"`fetchproxy {' '.join(words)}` has no help in its parent's list"
        assert parser.description, f"`fetchproxy {' '.join(words)} --help` describes nothing"
    # the ones the review named, so that a broken walk cannot pass vacuously
    assert {"record", "replay", "serve", "demo", "ca path", "lock show", "store"} <= set(found)


@pytest.mark.parametrize(
    ("argv", "summary"),
    [
        (("record",), "run BUILD in the network sandbox; record every fetch into the lock"),
        (("replay",), "run BUILD in the network sandbox; serve only what the lock holds"),
        (("demo",), "the whole story on embedded defaults: record, replay, refuse, review"),
        (("ca", "path"), "print the path of the CA certificate clients must trust"),
    ],
)
def test_a_commands_help_starts_with_what_it_does(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], summary: str
) -> None:
    shown = help_text(capsys, *argv)
    assert re.search(rf"^usage: fetchproxy {' '.join(argv)} .*? {re.escape(summary)} ", shown)


def test_serve_help_says_what_each_mode_does(capsys: pytest.CaptureFixture[str]) -> None:
    shown = help_text(capsys, "serve")
    assert (
        "{record,replay} record: pass requests upstream and record every fetch into the lock; "
        "replay: answer only what the lock holds, from the store, and refuse the rest"
    ) in shown
    assert "--keep record: keep the existing lock" in shown
    assert "--upstream-ca PATH record: also trust" in shown
    assert "--exact replay: exit 3" in shown


# ----------------------------------------------------------------------- serve's mode options


@pytest.mark.parametrize(
    ("mode", "option", "owner"),
    [
        ("replay", "--keep", "record"),
        ("replay", "--upstream-ca", "record"),
        ("record", "--exact", "replay"),
    ],
)
def test_serve_refuses_an_option_of_the_other_mode(
    capsys: pytest.CaptureFixture[str], ca_cert: Path, mode: str, option: str, owner: str
) -> None:
    value = [str(ca_cert)] if option == "--upstream-ca" else []
    err = usage_error(capsys, "serve", mode, option, *value)
    assert err.startswith("usage: fetchproxy serve ")
    assert err.endswith(
        f"\nfetchproxy serve: error: {option} is for serve {owner}, not serve {mode}\n"
    )


def test_serve_takes_each_modes_own_options(ca_cert: Path) -> None:
    recording = parse_cli("serve", "record", "--keep", "--upstream-ca", str(ca_cert))
    assert (recording.keep, recording.upstream_ca, recording.exact) == (True, [ca_cert], False)
    replaying = parse_cli("serve", "replay", "--exact")
    assert (replaying.keep, replaying.upstream_ca, replaying.exact) == (False, [], True)


def test_the_mode_error_is_the_exit_status_of_the_command(tmp_path: Path) -> None:
    done = run_main("serve", "replay", "--keep", "--listen", "127.0.0.1:0", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.endswith(
        "\nfetchproxy serve: error: --keep is for serve record, not serve replay\n"
    )


@pytest.mark.parametrize(
    ("command", "option"),
    [("replay", "--keep"), ("replay", "--upstream-ca"), ("record", "--exact")],
)
def test_record_and_replay_take_only_their_own_options(
    capsys: pytest.CaptureFixture[str], ca_cert: Path, command: str, option: str
) -> None:
    value = [str(ca_cert)] if option == "--upstream-ca" else []
    err = usage_error(capsys, command, option, *value, "--", "make")
    assert err.startswith(f"usage: fetchproxy {command} ")
    # the value of --upstream-ca is taken for the start of the build, after the unknown option
    assert err.endswith(f"\nfetchproxy {command}: error: unrecognized arguments: {option}\n")


# ------------------------------------------------------------------------------------ --listen


def test_a_listen_port_out_of_range_says_the_range(capsys: pytest.CaptureFixture[str]) -> None:
    err = usage_error(capsys, "serve", "record", "--listen", "127.0.0.1:99999")
    assert err.endswith(
        "\nfetchproxy serve: error: argument --listen: '127.0.0.1:99999': "
        "the port must be from 0 to 65535 (0 picks a free one)\n"
    )


@pytest.mark.parametrize(
    ("value", "address"),
    [
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("[::1]:65535", ("::1", 65535)),
        (":8080", ("127.0.0.1", 8080)),
    ],
)
def test_listen_takes_host_and_port(value: str, address: tuple[str, int]) -> None:
    assert parse_cli("serve", "record", "--listen", value).listen == address


@pytest.mark.parametrize("value", ["8080", "127.0.0.1:", "127.0.0.1:http", "127.0.0.1:-1"])
def test_a_listen_address_without_a_port_is_not_host_port(
    capsys: pytest.CaptureFixture[str], value: str
) -> None:
    err = usage_error(capsys, "serve", "record", "--listen", value)
    assert err.endswith(f"argument --listen: {value!r} is not HOST:PORT (e.g. 127.0.0.1:8080)\n")


# ------------------------------------------------------------------------------- --upstream-ca


def test_upstream_ca_takes_a_pem_certificate_as_a_path(ca_cert: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle.pem"
    other = generate_ca("another CA").cert_pem
    bundle.write_bytes(b"# an origin's CAs\n" + ca_cert.read_bytes() + other)
    args = parse_cli("record", "--upstream-ca", str(ca_cert), "--upstream-ca", str(bundle))
    assert args.upstream_ca == [ca_cert, bundle]
    assert all(isinstance(path, Path) for path in args.upstream_ca)


def test_upstream_ca_takes_a_file_with_a_key_beside_the_certificate(tmp_path: Path) -> None:
    ca = generate_ca("origin CA")
    both = tmp_path / "key-and-cert.pem"
    both.write_bytes(ca.key_pem + ca.cert_pem)
    assert parse_cli("serve", "record", "--upstream-ca", str(both)).upstream_ca == [both]


def test_upstream_ca_takes_openssl_trusted_certificates(tmp_path: Path) -> None:
    """A distribution's trust bundle may hold OpenSSL's TRUSTED CERTIFICATE blocks only."""
    pem = generate_ca("origin CA").cert_pem.replace(b" CERTIFICATE-", b" TRUSTED CERTIFICATE-")
    trusted = tmp_path / "ca-bundle.trust.crt"
    trusted.write_bytes(pem)
    assert parse_cli("record", "--upstream-ca", str(trusted), "--", "make").upstream_ca == [trusted]


@pytest.mark.parametrize("content", ["key", "text", "empty", "broken"])
def test_upstream_ca_without_a_certificate_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = generate_ca("origin CA").cert_pem
    data = {
        "key": key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
        "text": b"not a certificate\n",
        "empty": b"",
        "broken": cert[:40] + cert[80:],  # PEM armour around bytes that are no certificate
    }[content]
    path = tmp_path / "origin-ca.pem"
    path.write_bytes(data)
    err = usage_error(capsys, "record", "--upstream-ca", str(path), "--", "make")
    assert err.startswith("usage: fetchproxy record ")
    assert err.endswith(
        f"\nfetchproxy record: error: argument --upstream-ca: {path}: no PEM certificate in it "
        "(give the CA certificate of the origin)\n"
    )


@pytest.mark.parametrize(
    ("name", "reason"), [("missing.pem", "No such file or directory"), (".", "Is a directory")]
)
def test_an_unreadable_upstream_ca_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, reason: str
) -> None:
    path = tmp_path / name
    err = usage_error(capsys, "serve", "record", "--upstream-ca", str(path))
    assert err.endswith(
        f"\nfetchproxy serve: error: argument --upstream-ca: {path}: cannot read it: {reason}\n"
    )


# ----------------------------------------------------------------------- unknown arguments


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (("record", "--bogus", "--", "make"), "record"),
        (("replay", "--bogus"), "replay"),
        (("serve", "record", "--bogus"), "serve"),
        (("lock", "diff", "old.toml", "new.toml", "--bogus"), "lock diff"),
        (("lock", "--bogus", "verify"), "lock"),
        (("store", "gc", "--keep-lock", "a.toml", "--bogus"), "store gc"),
        (("ca", "path", "--bogus"), "ca path"),
    ],
)
def test_an_unknown_argument_is_reported_with_the_usage_of_its_command(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], command: str
) -> None:
    err = usage_error(capsys, *argv)
    assert err.startswith(f"usage: fetchproxy {command} [-h]")
    assert err.endswith(f"\nfetchproxy {command}: error: unrecognized arguments: --bogus\n")


def test_an_unknown_argument_from_the_command_line_exits_2(tmp_path: Path) -> None:
    done = run_main("record", "--bogus", "--", "true", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("usage: fetchproxy record [-h]")
    assert done.stderr.endswith("\nfetchproxy record: error: unrecognized arguments: --bogus\n")


def test_arguments_after_the_double_dash_are_the_builds(ca_cert: Path) -> None:
    args = parse_cli("record", "--upstream-ca", str(ca_cert), "--", "make", "--bogus", "--keep")
    assert args.build == ["--", "make", "--bogus", "--keep"]
    assert args.keep is False
