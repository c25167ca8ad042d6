"""Access control shared by every front end: the ACL model (``model.py``), the decision
(``authorizer.py``) and, as they come, authentication mechanisms (SCRAM, PLAIN). Pure Python:
the Django side stores users, tokens and entries and hands them in."""
