"""What the two HTTP front ends share, so that the console never imports the REST API.

* :mod:`shared.serializers`: the input rules (validation) and the JSON shapes; REST validates
  and answers with them, the console validates its forms with the same serializers (same
  rules, same messages), and the OpenAPI document is made from them.
* :mod:`shared.health`: acknowledging store problems, audited.
* :mod:`shared.addresses`: a request's client as a record's born host.

Users, roles, permissions and the audit log are :mod:`accounts`'; the broker is ``mqcore``'.
"""
