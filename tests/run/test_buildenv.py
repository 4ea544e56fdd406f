"""The build's environment: proxy and CA variables for every common client, presets overridden."""

from __future__ import annotations

from fetchproxy.run.buildenv import CA_VARIABLES, build_environment, wgetrc_text


def test_every_variable_points_at_the_run_and_presets_are_overridden() -> None:
    env = build_environment(
        {
            "PATH": "/usr/bin",
            "REQUESTS_CA_BUNDLE": "/etc/old.pem",
            "https_proxy": "http://corp:3128",
        },
        proxy_url="http://169.254.77.1:3128",
        ca_bundle="/run/fetchproxy/ca-bundle.pem",
        wgetrc="/run/fetchproxy/wgetrc",
    )
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
    assert wgetrc_text("/x.pem") == "ca_certificate = /x.pem\n"


def test_fetchproxys_own_secrets_never_reach_the_build() -> None:
    env = build_environment(
        {"PATH": "/usr/bin", "FETCHPROXY_ATTEST_PASSPHRASE": "s3cret", "FETCHPROXY_STORE": "/s"},
        proxy_url="http://169.254.77.1:3128",
        ca_bundle="/run/fetchproxy/ca-bundle.pem",
        wgetrc=None,
    )
    assert "FETCHPROXY_ATTEST_PASSPHRASE" not in env
    assert "s3cret" not in env.values()
    assert env["FETCHPROXY_STORE"] == "/s"  # only the secrets go
