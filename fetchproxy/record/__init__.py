"""Recording: what to strip and keep of an exchange (``rules``, pure), and the books of one record
run (``book``, :class:`RecordBook`) from the checks before it starts to the lock it writes. No
mitmproxy: the record addon only translates flows.
"""
