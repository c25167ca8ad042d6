"""Accounts: users' API tokens (hashed), SCRAM credentials, ACL entries and failed-login state.

The operations (create a user, set a role, issue a token, add an ACL entry, lift a lockout...)
are in :mod:`accounts.service`, each audited; :class:`accounts.access.DjangoAccess` is the
:class:`mqcore.access.backend.AccessBackend` the runtime hands to non-Django front ends.
"""
