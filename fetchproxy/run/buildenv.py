"""What a sandboxed build is given: its environment, and the files it finds in /run/fetchproxy/.

Pure: from the user's environment, where the proxy listens and where the files will be (as the
build sees them), :func:`build_setup` makes the build's environment and the files' bytes; the
run (:mod:`fetchproxy.run.build`) only places them. Three kinds of variables, three rules:

- **The proxy and the CA** (``https_proxy``, ``SSL_CERT_FILE``, ``PIP_CERT``, …) point at this
  run's proxy and CA *whatever the user's environment says*: a preset value would send a client
  elsewhere (a preset ``REQUESTS_CA_BUNDLE`` would win over ``PIP_CERT``).
- **Tools that read none of them** get theirs too, keeping what the user set: ``APT_CONFIG``
  names a file that includes the user's own ``APT_CONFIG`` file first, and
  ``JAVA_TOOL_OPTIONS`` is the user's value with the trust store and the proxy properties
  appended (the last of a repeated ``-D`` wins, so the run's trust store and proxy do).
- **Self-update checks off** (:data:`CHECKS_OFF`): time-dependent fetches no build needs (npm
  asks for ``/npm`` at most once a week, pnpm for ``/pnpm`` once a day…), which would make a
  replay refuse them or leave them unused depending on the day. These are set only where the
  user's environment does not set the variable: a value the user chose explicitly wins.

The list, and which client reads which variable, is in docs/clients.md (a test checks it
against this module).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from fetchproxy.run.jks import PASSWORD, jks_truststore

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
JAVA_NON_PROXY_HOSTS = "localhost|127.0.0.1|[::1]"
"""The same hosts for the JVM (``http.nonProxyHosts``, which also covers https)."""

CA_VARIABLES = (
    "SSL_CERT_FILE",  # OpenSSL-based clients, Python's ssl
    "CURL_CA_BUNDLE",  # curl prefers it over SSL_CERT_FILE
    "REQUESTS_CA_BUNDLE",  # requests (and pip, where set)
    "PIP_CERT",  # pip ignores SSL_CERT_FILE
    "GIT_SSL_CAINFO",  # git ignores SSL_CERT_FILE
    "NODE_EXTRA_CA_CERTS",  # node
    "npm_config_cafile",  # npm through a proxy ignores NODE_EXTRA_CA_CERTS
    "CARGO_HTTP_CAINFO",  # cargo (1.65 reads no other)
)

CHECKS_OFF: Final = (
    ("npm_config_update_notifier", "false"),  # npm: GET <registry>/npm; pnpm: GET .../pnpm
    ("PIP_DISABLE_PIP_VERSION_CHECK", "1"),  # pip: GET <index>/pip/ once a week
    ("YARN_DISABLE_SELF_UPDATE_CHECK", "true"),  # yarn 1: GET yarnpkg.com/latest-version
    ("NODE_USE_ENV_PROXY", "1"),  # Node 24 and later: fetch() and https use https_proxy
)
"""Variables set unless the user's environment sets them (a value the user chose wins). Not
set: ``GOTOOLCHAIN`` (a toolchain go downloads is a module like any other, recorded and
replayed; ``local`` would break a go.mod that asks for a newer go) and ``GOTELEMETRY`` (not
read from the environment; go uploads nothing unless ``go telemetry on`` was run)."""

ATTEST_PASSPHRASE = "FETCHPROXY_ATTEST_PASSPHRASE"  # noqa: S105 -- a variable's name
"""The passphrase of ``replay --attest-key`` (never an argument: arguments are visible to every
process on the host)."""
PRIVATE_VARIABLES = (ATTEST_PASSPHRASE,)
"""fetchproxy's own secrets: read by fetchproxy, never passed to the build."""

CA_BUNDLE: Final = "ca-bundle.pem"
WGETRC: Final = "wgetrc"
TRUSTSTORE: Final = "truststore.jks"
APT_CONF: Final = "apt.conf"
FILE_NAMES: Final = (CA_BUNDLE, WGETRC, TRUSTSTORE, APT_CONF)
"""The files a build finds in its directory (``/run/fetchproxy`` in the sandbox)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class BuildSetup:
    """The build's environment and the files to place in its directory (name → bytes)."""

    env: dict[str, str]
    files: dict[str, bytes]


def build_setup(
    environ: Mapping[str, str],
    *,
    proxy_host: str,
    proxy_port: int,
    directory: str,
    bundle: bytes,
    apt_as_root: bool = False,
) -> BuildSetup:
    """What the build gets: ``environ`` with every variable pointing at this run and without
    fetchproxy's own secrets (:data:`PRIVATE_VARIABLES`), and the files it names, to be placed
    in ``directory``.

    ``bundle`` is the PEM bundle the build trusts (the system's CAs and the run's);
    ``apt_as_root``: apt may not drop to its ``_apt`` user (in the user sandbox, where the
    build cannot set groups), so its downloads run as the build's own user.
    """
    paths = {name: posixpath.join(directory, name) for name in FILE_NAMES}
    proxy_url = f"http://{proxy_host}:{proxy_port}"
    env = {name: value for name, value in environ.items() if name not in PRIVATE_VARIABLES}
    for name in PROXY_VARIABLES:
        env[name] = proxy_url
    for name in NO_PROXY_VARIABLES:
        env[name] = LOCAL_ONLY
    for name in CA_VARIABLES:
        env[name] = paths[CA_BUNDLE]
    env["WGETRC"] = paths[WGETRC]
    env["APT_CONFIG"] = paths[APT_CONF]
    options = java_options(truststore=paths[TRUSTSTORE], proxy_host=proxy_host, port=proxy_port)
    users = environ.get("JAVA_TOOL_OPTIONS", "").strip()
    env["JAVA_TOOL_OPTIONS"] = " ".join([users, *options] if users else options)
    env.update(_checks_off(environ))
    files = {
        CA_BUNDLE: bundle,
        WGETRC: wgetrc_text(paths[CA_BUNDLE]).encode(),
        TRUSTSTORE: jks_truststore(bundle),
        APT_CONF: apt_conf_text(
            ca_bundle=paths[CA_BUNDLE],
            proxy_url=proxy_url,
            include=environ.get("APT_CONFIG"),
            as_root=apt_as_root,
        ).encode(),
    }
    return BuildSetup(env=env, files=files)


def _checks_off(environ: Mapping[str, str]) -> dict[str, str]:
    """:data:`CHECKS_OFF`, but for the variables the user's environment sets."""
    chosen = {name.lower() for name in environ}
    return {
        name: value
        for name, value in CHECKS_OFF
        # npm reads its npm_config_* variables in any case: NPM_CONFIG_UPDATE_NOTIFIER too
        if name not in environ and not (name.startswith("npm_") and name.lower() in chosen)
    }


def wgetrc_text(ca_bundle: str) -> str:
    """A wgetrc that trusts the run's CA (wget reads no CA variable)."""
    return f"ca_certificate = {ca_bundle}\n"


def java_options(*, truststore: str, proxy_host: str, port: int) -> list[str]:
    """The JVM options that make every JVM tool (Maven, Gradle, sbt, …) trust the run's CA and
    use its proxy: the JVM reads no proxy or CA variable."""
    options = [
        f"-Djavax.net.ssl.trustStore={truststore}",
        "-Djavax.net.ssl.trustStoreType=JKS",
        f"-Djavax.net.ssl.trustStorePassword={PASSWORD}",
    ]
    for scheme in ("http", "https"):
        options += [f"-D{scheme}.proxyHost={proxy_host}", f"-D{scheme}.proxyPort={port}"]
    options.append(f"-Dhttp.nonProxyHosts={JAVA_NON_PROXY_HOSTS}")
    # the JVM splits JAVA_TOOL_OPTIONS at white space, and keeps a quoted option whole
    return [f'"{o}"' if any(c.isspace() for c in o) else o for o in options]


def apt_conf_text(
    *, ca_bundle: str, proxy_url: str, include: str | None = None, as_root: bool = False
) -> str:
    """The ``APT_CONFIG`` file: apt reads no CA variable, only ``Acquire::https::CAInfo``.

    apt still reads its own configuration (/etc/apt/apt.conf.d/) after this file, and a user's
    ``APT_CONFIG`` file (``include``) is included first, so these settings win over it. A path
    apt's syntax cannot quote (a ``"`` or a line break in it) is not included.
    """
    lines = ["// fetchproxy: this run's CA and proxy (docs/clients.md, apt)"]
    if include and not any(c in include for c in '"\n\r'):
        lines.append(f'#include "{include}";')
    lines += [
        f'Acquire::https::CAInfo "{ca_bundle}";',
        f'Acquire::http::Proxy "{proxy_url}";',
        f'Acquire::https::Proxy "{proxy_url}";',
    ]
    if as_root:
        lines.append('APT::Sandbox::User "root";  // the user sandbox cannot set groups')
    return "\n".join(lines) + "\n"
