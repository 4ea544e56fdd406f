"""Maven and Gradle on OpenJDK 17 through the real sandbox, with no flag for fetchproxy.

Both build a small project that needs one dependency from an HTTPS Maven repository with its
own CA, given by name (the JVM never proxies a loopback address). The JVM reads no proxy or CA
variable: what makes them work is fetchproxy's ``JAVA_TOOL_OPTIONS`` (a trust store of the
whole CA bundle, and the proxy). Each build is recorded, the repository is stopped, and the
build is replayed with ``--exact``: the same jar and the same fetched files, every lock entry
served, no repository connection. docs/clients.md shows the same commands.

- **Maven** (Debian's 3.8.7): ``mvn -B package``. The plugins and their closure come from
  Debian's own Maven repository (``/usr/share/maven-repo``, laid out by the
  ``libmaven-*-plugin-java`` packages), served as Central would serve them, with a ``.sha1``
  beside every file; the dependency is made by the test. The project has no tests and unbinds
  surefire's ``default-test`` (Debian's surefire is 50 more packages); every other step of
  ``package`` runs: resources, compiler, jar.
- **Gradle** (Debian's 4.4.1, installed: no distribution to download): ``gradle build`` with
  the ``java`` plugin, which Gradle carries.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.clients.support.builds import (
    LOCK,
    assert_replay_served,
    fetchproxy,
    lock_entries,
    prepare_work,
    resolving,
)
from tests.support.real_origins import HTTPSOrigin, OriginReply, OriginRequest, Respond
from tests.support.tools import missing_tool, require

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="the network sandbox needs root (CI is root)"),
]

HOST = "maven.fetchproxy.test"
"""The repository's name: the JVM never proxies a loopback address, so the builds get a name,
which the recording proxy resolves to the origin's 127.0.0.2 (:func:`resolving`)."""
DEBIAN_REPOSITORY = Path("/usr/share/maven-repo")
PLUGINS = {  # Debian 12's versions (libmaven-{resources,compiler,jar}-plugin-java)
    "maven-resources-plugin": "3.3.0",
    "maven-compiler-plugin": "3.10.1",
    "maven-jar-plugin": "3.3.0",
}
PREFIX = "/maven2/"
HELLO = "com/example/hello/1.0/hello-1.0"
HELLO_JAVA = """package com.example.hello;

public final class Hello {
    private Hello() {}

    public static String greeting() {
        return "hello from a fetched jar";
    }
}
"""
APP_JAVA = """package com.example.app;

public final class App {
    public static void main(String[] args) {
        System.out.println(com.example.hello.Hello.greeting());
    }
}
"""
BOOKKEEPING = ("_remote.repositories", "resolver-status.properties")
"""Files Maven keeps in its local repository with the time in them: named, not compared."""


def hello_artifact(directory: Path) -> dict[str, bytes]:
    """``com.example:hello:1.0``: a jar of one class compiled by ``javac``, and its pom."""
    tools = require("javac", install="apt-get install default-jdk-headless")
    source = directory / "Hello.java"
    directory.mkdir(parents=True)
    source.write_text(HELLO_JAVA)
    classes = directory / "classes"
    subprocess.run(
        [tools["javac"], "--release", "17", "-d", classes, source], check=True, capture_output=True
    )
    jar = io.BytesIO()
    with zipfile.ZipFile(jar, "w") as archive:
        for path in sorted(classes.rglob("*.class")):
            info = zipfile.ZipInfo(str(path.relative_to(classes)), date_time=(2024, 1, 1, 0, 0, 0))
            archive.writestr(info, path.read_bytes())
    pom = (
        '<project xmlns="http://maven.apache.org/POM/4.0.0">\n'
        "  <modelVersion>4.0.0</modelVersion>\n"
        "  <groupId>com.example</groupId><artifactId>hello</artifactId><version>1.0</version>\n"
        "</project>\n"
    )
    return {f"{HELLO}.jar": jar.getvalue(), f"{HELLO}.pom": pom.encode()}


def maven_repository(own: dict[str, bytes]) -> Respond:
    """A static Maven repository under ``/maven2/``: ``own`` (path -> bytes) and Debian's, with
    a ``.sha1`` beside every file; anything else is a 404."""

    def body(path: str) -> bytes | None:
        if path.endswith(".sha1"):
            data = body(path.removesuffix(".sha1"))
            return None if data is None else hashlib.sha1(data).hexdigest().encode()
        if path in own:
            return own[path]
        parts = path.split("/")
        if any(part in ("", ".", "..") for part in parts):
            return None
        file = DEBIAN_REPOSITORY.joinpath(*parts)  # its links lead to /usr/share/java
        return file.read_bytes() if file.is_file() else None

    def respond(request: OriginRequest) -> OriginReply:
        path = request.target.partition("?")[0]
        found = body(path.removeprefix(PREFIX)) if path.startswith(PREFIX) else None
        if request.method != "GET" or found is None:
            return OriginReply(404, (("Content-Type", "text/plain"),), b"not found\n")
        return OriginReply(200, (("Content-Type", "application/octet-stream"),), found)

    return respond


def maven_project(work: Path, repository_url: str) -> None:
    """A jar project that needs hello, with Central mirrored by ``repository_url``."""
    plugins = "".join(
        f"<plugin><groupId>org.apache.maven.plugins</groupId><artifactId>{name}</artifactId>"
        f"<version>{version}</version></plugin>\n      "
        for name, version in PLUGINS.items()
    )
    (work / "pom.xml").write_text(f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>com.example</groupId><artifactId>app</artifactId><version>1.0</version>
  <properties>
    <maven.compiler.release>17</maven.compiler.release>
    <project.build.sourceEncoding>UTF-8</project.build.sourceEncoding>
    <project.build.outputTimestamp>2024-01-01T00:00:00Z</project.build.outputTimestamp>
  </properties>
  <dependencies>
    <dependency><groupId>com.example</groupId><artifactId>hello</artifactId><version>1.0</version></dependency>
  </dependencies>
  <build>
    <plugins>
      {plugins}<plugin><groupId>org.apache.maven.plugins</groupId><artifactId>maven-surefire-plugin</artifactId>
        <executions><execution><id>default-test</id><phase>none</phase></execution></executions></plugin>
    </plugins>
  </build>
</project>
""")
    (work / "settings.xml").write_text(f"""<settings>
  <mirrors><mirror><id>repository</id><mirrorOf>*</mirrorOf><url>{repository_url}</url></mirror></mirrors>
</settings>
""")
    app = work / "src/main/java/com/example/app"
    app.mkdir(parents=True)
    (app / "App.java").write_text(APP_JAVA)


MAVEN_BUILD = "mvn -B -ntp -s settings.xml -Dmaven.repo.local=$PWD/repository package 2>&1"
"""The project's own settings and a local repository in the working directory (the JVM's
``user.home`` is the passwd entry's, whose ``~/.m2`` could answer without a request). Maven's
stderr goes to its stdout: it ends with a terminal escape code and no line break, which would
share a line with fetchproxy's summary."""


def maven_work(tmp_path: Path, repository_url: str) -> Path:
    work = prepare_work(tmp_path)
    maven_project(work, repository_url)
    return work


def built(work: Path) -> tuple[bytes, dict[str, bytes]]:
    """The jar ``package`` made, and the local repository (bookkeeping files by name only)."""
    local = work / "repository"
    files = {
        str(p.relative_to(local)): b"" if p.name in BOOKKEEPING else p.read_bytes()
        for p in sorted(local.rglob("*"))
        if p.is_file()
    }
    return (work / "target/app-1.0.jar").read_bytes(), files


def test_maven_package_trusts_the_run_through_java_tool_options_and_replays(
    tmp_path: Path,
) -> None:
    """``mvn -B package`` with no flag for fetchproxy, recorded then replayed ``--exact``.

    Maven keeps one connection to the proxy and sends every download on it: a recording that
    opened a new upstream connection per request stalled on the sixth (see the record addon's
    ``server_connected``)."""
    require("mvn", install="apt-get install maven")
    needed = [f"org/apache/maven/plugins/{name}/{v}" for name, v in PLUGINS.items()]
    needed.append("org/junit/junit-bom/debian")  # imported by plexus-compiler's pom
    if not all((DEBIAN_REPOSITORY / path).is_dir() for path in needed):
        missing_tool(
            f"{DEBIAN_REPOSITORY} lacks what `mvn package` needs: apt-get install junit5 "
            "libmaven-resources-plugin-java libmaven-compiler-plugin-java libmaven-jar-plugin-java"
        )
    own = hello_artifact(tmp_path / "hello")
    with HTTPSOrigin(tmp_path / "origin", maven_repository(own), names=[HOST]) as origin:
        url = f"https://{HOST}:{origin.url.rpartition(':')[2]}{PREFIX.rstrip('/')}"
        work = maven_work(tmp_path / "record", url)
        recorded = fetchproxy(
            work, tmp_path / "store", "record", "--upstream-ca", origin.ca_path,
            "--allow-origin", HOST, "--", "sh", "-c", MAVEN_BUILD,
            prefix=resolving(tmp_path, HOST),
        )  # fmt: skip
    assert recorded.returncode == 0, recorded.stdout[-4000:] + recorded.stderr
    assert "BUILD SUCCESS" in recorded.stdout
    assert "Picked up JAVA_TOOL_OPTIONS: -Djavax.net.ssl.trustStore=/run/fetchproxy/" in (
        recorded.stdout
    )
    fetched = [r.target for r in origin.requests]
    assert f"{PREFIX}{HELLO}.jar" in fetched
    assert f"{PREFIX}{HELLO}.jar.sha1" in fetched
    assert len(fetched) == len(set(fetched)) == lock_entries(work)
    assert not [t for t in fetched if "surefire" in t]  # unbound: libsurefire-java not needed
    jar, local = built(work)
    assert local[f"{HELLO}.jar"] == own[f"{HELLO}.jar"]
    with zipfile.ZipFile(io.BytesIO(jar)) as archive:
        assert "com/example/app/App.class" in archive.namelist()

    again = maven_work(tmp_path / "replay", url)
    shutil.copy(work / LOCK, again / LOCK)
    replayed = fetchproxy(
        again, tmp_path / "store", "replay", "--exact", "--", "sh", "-c", MAVEN_BUILD
    )
    assert_replay_served(replayed, again, requests=lock_entries(again))
    assert built(again) == (jar, local)
    assert len(origin.requests) == len(fetched)  # the replay reached no repository


# --------------------------------------------------------------------------------------- gradle

GRADLE_BUILD = "gradle --no-daemon -q --console=plain build 2>&1"
"""Debian's Gradle 4.4.1 is installed, not downloaded by a wrapper: there is no distribution
to serve. ``GRADLE_USER_HOME`` is in the working directory (its default is under the JVM's
``user.home``, the passwd entry's)."""


def gradle_work(tmp_path: Path, repository_url: str) -> Path:
    work = prepare_work(tmp_path)
    (work / "settings.gradle").write_text("rootProject.name = 'app'\n")
    (work / "build.gradle").write_text(f"""apply plugin: 'java'
sourceCompatibility = '1.8'
targetCompatibility = '1.8'
repositories {{ maven {{ url '{repository_url}' }} }}
dependencies {{ compile 'com.example:hello:1.0' }}
tasks.withType(AbstractArchiveTask) {{
    preserveFileTimestamps = false
    reproducibleFileOrder = true
}}
""")
    app = work / "src/main/java/com/example/app"
    app.mkdir(parents=True)
    (app / "App.java").write_text(APP_JAVA)
    return work


def gradle_built(work: Path) -> tuple[bytes, dict[str, bytes]]:
    """The jar ``build`` made, and the files Gradle keeps of the fetched module."""
    cache = work / "gradle-home/caches/modules-2/files-2.1/com.example"
    files = {str(p.relative_to(cache)): p.read_bytes() for p in cache.rglob("*") if p.is_file()}
    return (work / "build/libs/app.jar").read_bytes(), files


def test_gradle_build_trusts_the_run_through_java_tool_options_and_replays(
    tmp_path: Path,
) -> None:
    """``gradle build`` (Debian's Gradle 4.4.1) with no flag for fetchproxy, recorded then
    replayed ``--exact``: the same jar, the same module files in Gradle's cache."""
    require("gradle", install="apt-get install gradle")
    own = hello_artifact(tmp_path / "hello")
    env = {"GRADLE_USER_HOME": "gradle-home"}
    with HTTPSOrigin(tmp_path / "origin", maven_repository(own), names=[HOST]) as origin:
        url = f"https://{HOST}:{origin.url.rpartition(':')[2]}{PREFIX.rstrip('/')}"
        work = gradle_work(tmp_path / "record", url)
        recorded = fetchproxy(
            work, tmp_path / "store", "record", "--upstream-ca", origin.ca_path,
            "--allow-origin", HOST, "--", "sh", "-c", GRADLE_BUILD,
            prefix=resolving(tmp_path, HOST), env=env,
        )  # fmt: skip
    assert recorded.returncode == 0, recorded.stdout[-4000:] + recorded.stderr
    assert "Picked up JAVA_TOOL_OPTIONS: -Djavax.net.ssl.trustStore=/run/fetchproxy/" in (
        recorded.stdout
    )
    fetched = [r.target for r in origin.requests]
    assert fetched == [f"{PREFIX}{HELLO}.pom", f"{PREFIX}{HELLO}.jar"]
    assert lock_entries(work) == 2
    jar, cached = gradle_built(work)
    assert sorted(Path(name).name for name in cached) == ["hello-1.0.jar", "hello-1.0.pom"]
    assert own[f"{HELLO}.jar"] in cached.values()
    with zipfile.ZipFile(io.BytesIO(jar)) as archive:
        assert "com/example/app/App.class" in archive.namelist()

    again = gradle_work(tmp_path / "replay", url)
    shutil.copy(work / LOCK, again / LOCK)
    replayed = fetchproxy(
        again, tmp_path / "store", "replay", "--exact", "--", "sh", "-c", GRADLE_BUILD, env=env
    )
    assert_replay_served(replayed, again, requests=lock_entries(again))
    assert gradle_built(again) == (jar, cached)
    assert len(origin.requests) == len(fetched)  # the replay reached no repository
