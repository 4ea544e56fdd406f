"""Parts of bench/remote_bench.py: the candidate S3 clients (``candidates``) and the peers
(``peers``), each run as a worker process the bench times and measures."""
