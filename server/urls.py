from django.urls import include, path

from server import views

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    path("api/v1/", include("api.urls", namespace="api")),
    path("", include("webui.urls")),
]
