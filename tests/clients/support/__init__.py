"""What the real-client tests (``tests/clients/test_*.py``) share, by topic: running a build
through fetchproxy and checking its replay (:mod:`.builds`), and the origins they record from
(:mod:`.git_http`, :mod:`.pip_index`, :mod:`.npm_registry`, :mod:`.oci_registry`), with their
fixtures, which a test module imports by name to use them."""
