"""The root of fetchproxy's exceptions.

Specific errors live next to the code that raises them and subclass both
:class:`FetchproxyError` and the builtin they refine, so callers can catch
either. The CLI turns a ``FetchproxyError`` into its message and exit status 2
("bad input"); anything else escaping is a bug and keeps its traceback.
"""

from __future__ import annotations


class FetchproxyError(Exception):
    """Something the user can fix: bad input, a missing file, a refused request.

    The message says what happened, where (file, line, URL) and what to do.
    """

    exit_status: int = 2
