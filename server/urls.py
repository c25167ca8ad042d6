from django.urls import include, path

from server import views
from server.metrics.view import metrics

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    path("metrics", metrics, name="metrics"),
    path("api/v1/", include("api.urls", namespace="api")),
    path("", include("webui.urls")),
]
