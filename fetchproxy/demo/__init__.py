"""``fetchproxy demo``: the story (``story``) and its origin (``origin``)."""
