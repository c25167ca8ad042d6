"""Sharing one store directory between processes (Celery mode): the process roles
(``process_role.py``), the offsets the processes publish to each other (``progress.py``,
``publisher.py``), following the others (``follower.py``), the services process that
writes the derived files (``reput_holder.py``) and the broker's start (``writer_open.py``)."""
