"""The parts of ``bench/proxy_bench.py``: the systems it runs, the load, the tables.

- :mod:`proxybench.systems` starts and stops every process the benchmark measures (nginx or a
  Python stand-in as the HTTPS origin, ``fetchproxy serve``, ``mitmdump``), all on 127.0.0.1,
  and reads their memory from ``/proc``.
- :mod:`proxybench.rig` is one run's fixture: files, CAs, origin, and the recorded lock and store.
- :mod:`proxybench.loadgen` is the load: an asyncio client keeping HTTPS connections alive
  through a proxy's CONNECT, and ``curl`` for large bodies and for HTTP/2.
- :mod:`proxybench.rounds` runs systems in interleaved rounds and formats the report.
- :mod:`proxybench.deadline` is ``--time-limit``: a run that takes too long is stopped.
- :mod:`proxybench.throughput` and :mod:`proxybench.memory` are the tables.
- :mod:`proxybench.answer_everything` and :mod:`proxybench.upstream_alpn` are mitmproxy addon
  scripts (the ceiling; a fixed protocol to the origin); :mod:`proxybench.static_origin` is the
  origin used without nginx.

``bench/peers_bench.py`` (fetchproxy against its peers) reuses them and adds:

- :mod:`proxybench.peers`: the contenders (fetchproxy replay, mitmdump --server-replay, proxay and
  talkback installed with npm and run by ``node_peers.js``, nginx) and how each records and serves.
- :mod:`proxybench.recordings`: every contender records every workload once.
- :mod:`proxybench.versus`: the workloads (a) to (d) side by side; :mod:`proxybench.first_request`
  times a start to the first served request; :mod:`proxybench.record_mode` is record mode.
"""
