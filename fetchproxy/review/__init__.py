"""What people and CI run over locks and the store: the diff of two locks (``diff``), the same
in package words (``packages``) and as a pull-request comment (``markdown``), the merge of two
locks (``merge``, git's merge driver), ``lock verify`` (``lockverify``), ``store verify``
(``storeverify``) and ``store gc`` (``gc``). Policies only: the store's files are the store's.
"""
