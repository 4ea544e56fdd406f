"""The lock and the files beside it: the model, its TOML text, the journal, the event log and the
project's ``fetchproxy.toml``.

``model`` is the model (pure values, one field table); ``file`` its canonical text and its
reading and writing; ``journal`` the record journal; ``eventlog`` the event log and its one
schema; ``config`` the project's settings.
"""
