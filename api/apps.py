from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "api"
    verbose_name = "Cairn REST API"

    def ready(self) -> None:
        from api import schema_ext  # noqa: F401  (registers the OpenAPI extensions)
