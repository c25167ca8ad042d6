import pytest
from django.test import Client


@pytest.mark.django_db
def test_healthz_answers_json_without_login() -> None:
    response = Client().get("/healthz")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert body["status"] == "ok"
    assert body["version"]
    assert body["store_dir"].endswith("store")
    assert isinstance(body["uptime_s"], float)


@pytest.mark.django_db
def test_healthz_refuses_post() -> None:
    assert Client().post("/healthz").status_code == 405
