"""sync: a lock's blobs brought where they are needed.

To and from the remote store (``remote``: push and pull by lock, named by the lock's entries;
``steps``: record's upload before the lock is written and replay's pull before it listens;
``remotegc``: which objects ``store gc --remote`` deletes, and the report), and from the
origins themselves (``refetch``: ``store fetch``, each body verified against the lock's
digest; ``upstream``: its HTTP client; ``challenge`` and ``bearer``: a registry's Bearer
challenge answered with an anonymous token); ``progress`` is how a transfer shows itself on a
terminal and in a log.
"""
