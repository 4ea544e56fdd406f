"""fetchproxy: hermetic builds at the network boundary.

A build runs in a network sandbox (``sandbox``) whose only route is a proxy. Each request the
build makes becomes a key (``keys``: request → key, pure). Recording forwards it upstream
through mitmproxy with fetchproxy's addons (the mitmproxy wing, ``fetchproxy.addons``: the only
code that imports mitmproxy), streams each answer's body into the content-addressed store
(``store``) and hands the entry to a :class:`~fetchproxy.record.book.RecordBook` (``record``),
which journals it and writes the lock (``lock``: model, canonical TOML, journal, event log,
project config). Replaying asks one :class:`~fetchproxy.replay.replayer.Replayer` (``replay``)
for every request — the exact lock entry, or a refusal — and answers from verified blobs,
on fetchproxy's own HTTP/1.1 server or, for HTTP/2, on mitmproxy. ``run`` starts the engine
where the build can reach it, runs the build and says how it ended; ``review`` is what people
run over locks and the store (diff, verify, gc); ``provenance`` says what a build was made of;
``cli`` is the command line, one lazy command table over all of it.

docs/how-it-works.md maps every module.
"""
