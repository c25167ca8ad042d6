"""Accounts: users, their roles, permissions (ACL entries) and the audit log, for every front end.

* :mod:`accounts.roles`: a user's role (viewer < operator < admin) and the subject a request
  stands for.
* :mod:`accounts.acls`: the ACL entries and the process's cached authorizer over them
  (the decision itself is ``mqcore.access.authorizer``'s).
* :mod:`accounts.audit`: writing the audit log (:class:`accounts.models.AuditEntry`).
* :mod:`accounts.service`: the account operations (create a user, set a role, issue a token,
  add an ACL entry, lift a lockout...), each audited; :mod:`accounts.logins`: throttling,
  lockout and the audit of logins; API tokens (hashed) and SCRAM credentials.
* :class:`accounts.access.DjangoAccess`: all of it as the
  :class:`mqcore.access.backend.AccessBackend` the runtime hands to the Kafka listener.

REST (``api.permissions``) and the console (``webui.access``) ask the same roles and the same
authorizer; nothing here imports a front end.
"""
