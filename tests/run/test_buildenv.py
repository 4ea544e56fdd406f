"""The build's environment and files: every client's variables, presets overridden or kept."""

from __future__ import annotations

from fetchproxy.run.buildenv import (
    CA_VARIABLES,
    CHECKS_OFF,
    FILE_NAMES,
    BuildSetup,
    apt_conf_text,
    build_setup,
    java_options,
    wgetrc_text,
)
from fetchproxy.run.jks import jks_truststore

BUNDLE = b"-----BEGIN CERTIFICATE-----\nMAMCAQA=\n-----END CERTIFICATE-----\n"


def setup_for(
    environ: dict[str, str], *, proxy_host: str = "169.254.77.1", apt_as_root: bool = False
) -> BuildSetup:
    """What a root sandbox's build gets (the proxy on the edge address, files in /run)."""
    return build_setup(
        environ,
        proxy_host=proxy_host,
        proxy_port=3128,
        directory="/run/fetchproxy",
        bundle=BUNDLE,
        apt_as_root=apt_as_root,
    )


JAVA = (
    "-Djavax.net.ssl.trustStore=/run/fetchproxy/truststore.jks -Djavax.net.ssl.trustStoreType=JKS "
    "-Djavax.net.ssl.trustStorePassword=changeit -Dhttp.proxyHost=169.254.77.1 "
    "-Dhttp.proxyPort=3128 -Dhttps.proxyHost=169.254.77.1 -Dhttps.proxyPort=3128 "
    "-Dhttp.nonProxyHosts=localhost|127.0.0.1|[::1]"
)


def test_every_variable_points_at_the_run_and_presets_are_overridden() -> None:
    setup = setup_for(
        {
            "PATH": "/usr/bin",
            "REQUESTS_CA_BUNDLE": "/etc/old.pem",
            "https_proxy": "http://corp:3128",
        }
    )
    env = setup.env
    assert env["PATH"] == "/usr/bin"
    for name in (
        "http_proxy",
        "HTTP_PROXY",
        "https_proxy",
        "HTTPS_PROXY",
        "npm_config_https_proxy",
    ):
        assert env[name] == "http://169.254.77.1:3128"
    for name in CA_VARIABLES:
        assert env[name] == "/run/fetchproxy/ca-bundle.pem"
    assert {"PIP_CERT", "GIT_SSL_CAINFO", "npm_config_cafile", "CURL_CA_BUNDLE"} <= set(
        CA_VARIABLES
    )
    assert env["no_proxy"] == env["NO_PROXY"] == "localhost,127.0.0.1,::1"
    assert env["WGETRC"] == "/run/fetchproxy/wgetrc"
    assert env["APT_CONFIG"] == "/run/fetchproxy/apt.conf"
    assert env["JAVA_TOOL_OPTIONS"] == JAVA
    assert wgetrc_text("/x.pem") == "ca_certificate = /x.pem\n"


def test_the_files_the_variables_name_are_all_made() -> None:
    setup = setup_for({})
    assert sorted(setup.files) == sorted(FILE_NAMES)
    assert setup.files["ca-bundle.pem"] == BUNDLE
    assert setup.files["truststore.jks"] == jks_truststore(BUNDLE)
    assert setup.files["wgetrc"] == b"ca_certificate = /run/fetchproxy/ca-bundle.pem\n"
    assert setup.files["apt.conf"] == (
        b"// fetchproxy: this run's CA and proxy (docs/clients.md, apt)\n"
        b'Acquire::https::CAInfo "/run/fetchproxy/ca-bundle.pem";\n'
        b'Acquire::http::Proxy "http://169.254.77.1:3128";\n'
        b'Acquire::https::Proxy "http://169.254.77.1:3128";\n'
    )


def test_the_users_java_options_and_apt_config_are_kept_under_the_runs() -> None:
    setup = setup_for(
        {"JAVA_TOOL_OPTIONS": " -Xmx1g -Djavax.net.ssl.trustStore=/mine.jks", "APT_CONFIG": "/my"}
    )
    # the last of a repeated -D wins: the run's trust store
    assert setup.env["JAVA_TOOL_OPTIONS"] == "-Xmx1g -Djavax.net.ssl.trustStore=/mine.jks " + JAVA
    conf = setup.files["apt.conf"].decode().splitlines()
    assert conf[1:3] == [
        '#include "/my";',
        'Acquire::https::CAInfo "/run/fetchproxy/ca-bundle.pem";',
    ]
    assert "#include" not in apt_conf_text(ca_bundle="/c", proxy_url="http://p:1", include='/a"b')


def test_apt_downloads_as_root_only_where_it_cannot_drop_privileges() -> None:
    user = setup_for({}, proxy_host="127.0.0.1", apt_as_root=True)
    root = setup_for({})
    assert b'APT::Sandbox::User "root";' in user.files["apt.conf"]
    assert b"APT::Sandbox" not in root.files["apt.conf"]


def test_self_update_checks_are_off_unless_the_user_chose() -> None:
    off = setup_for({}).env
    assert {name: off[name] for name, _ in CHECKS_OFF} == {
        "npm_config_update_notifier": "false",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "YARN_DISABLE_SELF_UPDATE_CHECK": "true",
        "NODE_USE_ENV_PROXY": "1",
    }
    chosen = setup_for(
        {
            "NPM_CONFIG_UPDATE_NOTIFIER": "true",  # npm reads its variables in any case
            "PIP_DISABLE_PIP_VERSION_CHECK": "0",
            "YARN_DISABLE_SELF_UPDATE_CHECK": "false",
        }
    ).env
    assert "npm_config_update_notifier" not in chosen
    assert chosen["NPM_CONFIG_UPDATE_NOTIFIER"] == "true"
    assert chosen["PIP_DISABLE_PIP_VERSION_CHECK"] == "0"
    assert chosen["YARN_DISABLE_SELF_UPDATE_CHECK"] == "false"
    assert chosen["NODE_USE_ENV_PROXY"] == "1"
    assert "GOTOOLCHAIN" not in chosen
    assert "GOTELEMETRY" not in chosen


def test_a_java_option_with_white_space_is_quoted() -> None:
    options = java_options(truststore="/tmp/my dir/t.jks", proxy_host="127.0.0.1", port=3)
    assert options[0] == '"-Djavax.net.ssl.trustStore=/tmp/my dir/t.jks"'
    assert options[1] == "-Djavax.net.ssl.trustStoreType=JKS"


def test_fetchproxys_own_secrets_never_reach_the_build() -> None:
    env = setup_for(
        {"PATH": "/usr/bin", "FETCHPROXY_ATTEST_PASSPHRASE": "s3cret", "FETCHPROXY_STORE": "/s"}
    ).env
    assert "FETCHPROXY_ATTEST_PASSPHRASE" not in env
    assert "s3cret" not in env.values()
    assert env["FETCHPROXY_STORE"] == "/s"  # only the secrets go
