"""The environment a sandboxed build gets: the proxy, and the run's CA for every common client.

Pure: from the user's environment, the proxy URL and the paths of the CA bundle and wgetrc as the
build sees them, the build's environment. Values the user's environment already has are
overridden (a preset ``REQUESTS_CA_BUNDLE`` would otherwise win over ``PIP_CERT``). The list, and
which client reads which variable, is in docs/clients.md.
"""

from __future__ import annotations

from collections.abc import Mapping

PROXY_VARIABLES = (
    "http_proxy",  # curl reads http_proxy in lowercase only
    "HTTP_PROXY",
    "https_proxy",
    "HTTPS_PROXY",
    "all_proxy",
    "ALL_PROXY",
    "npm_config_proxy",
    "npm_config_https_proxy",
)
NO_PROXY_VARIABLES = ("no_proxy", "NO_PROXY")
LOCAL_ONLY = "localhost,127.0.0.1,::1"
"""The build's own loopback stays direct: it is the sandbox's, not the host's."""

CA_VARIABLES = (
    "SSL_CERT_FILE",  # OpenSSL-based clients, Python's ssl
    "CURL_CA_BUNDLE",  # curl prefers it over SSL_CERT_FILE
    "REQUESTS_CA_BUNDLE",  # requests (and pip, where set)
    "PIP_CERT",  # pip ignores SSL_CERT_FILE
    "GIT_SSL_CAINFO",  # git ignores SSL_CERT_FILE
    "NODE_EXTRA_CA_CERTS",  # node
    "npm_config_cafile",  # npm through a proxy ignores NODE_EXTRA_CA_CERTS
    "CARGO_HTTP_CAINFO",  # cargo
)


ATTEST_PASSPHRASE = "FETCHPROXY_ATTEST_PASSPHRASE"  # noqa: S105 -- a variable's name
"""The passphrase of ``replay --attest-key`` (never an argument: arguments are visible to every
process on the host)."""
PRIVATE_VARIABLES = (ATTEST_PASSPHRASE,)
"""fetchproxy's own secrets: read by fetchproxy, never passed to the build."""


def build_environment(
    environ: Mapping[str, str], *, proxy_url: str, ca_bundle: str, wgetrc: str | None
) -> dict[str, str]:
    """``environ`` with every proxy and CA variable pointing at this run's proxy and CA, and
    without fetchproxy's own secrets."""
    env = {name: value for name, value in environ.items() if name not in PRIVATE_VARIABLES}
    for name in PROXY_VARIABLES:
        env[name] = proxy_url
    for name in NO_PROXY_VARIABLES:
        env[name] = LOCAL_ONLY
    for name in CA_VARIABLES:
        env[name] = ca_bundle
    if wgetrc is not None:
        env["WGETRC"] = wgetrc
    return env


def wgetrc_text(ca_bundle: str) -> str:
    """A wgetrc that trusts the run's CA (wget reads no CA variable)."""
    return f"ca_certificate = {ca_bundle}\n"
