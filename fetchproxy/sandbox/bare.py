"""Starting a sandbox program (``supervisor.py``, ``userns.py``) in a bare interpreter.

Every build pays for the interpreter's start and every import, so these programs run with
``python -I -S -B`` and import neither fetchproxy's nor fetchproxy.sandbox's ``__init__``
modules (and all they import): bare package objects stand in for them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import fetchproxy

_PACKAGE_PARENT = str(Path(fetchproxy.__file__).resolve().parent.parent)
_BOOTSTRAP = """\
import sys, types
root, module = sys.argv.pop(1), sys.argv.pop(1)
for name in ("fetchproxy", "fetchproxy.sandbox"):
    package = types.ModuleType(name)
    package.__path__ = [root + "/" + name.replace(".", "/")]
    sys.modules[name] = package
__import__(module, fromlist=["main"]).main(sys.argv[1:])
"""


def bare_command(module: str, *args: str) -> list[str]:
    """The command that runs ``module.main(args)`` in a bare interpreter (this one's)."""
    return [sys.executable, "-I", "-S", "-B", "-c", _BOOTSTRAP, _PACKAGE_PARENT, module, *args]
