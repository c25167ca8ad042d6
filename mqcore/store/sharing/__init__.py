"""Sharing one store directory between processes (Celery mode): the store's process
roles and the offsets the processes publish to each other."""
