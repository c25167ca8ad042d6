from django.apps import AppConfig


class CairnConfig(AppConfig):
    name = "cairn"
    verbose_name = "Cairn broker"
