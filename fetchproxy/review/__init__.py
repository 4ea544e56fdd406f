"""What people and CI run over locks and the store: the diff of two locks (``diff``), ``lock
verify`` (``lockverify``), ``store verify`` (``storeverify``) and ``store gc`` (``gc``).
Policies only: the store's files are the store's.
"""
