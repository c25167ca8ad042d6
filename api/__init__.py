"""The REST API (Django REST framework) at ``/api/v1/``: serializers validate, views call mqcore."""
