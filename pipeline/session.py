"""The one SparkSession builder of the pipeline, and the environment it needs.

Every job and the management command get their session from :func:`get_session`. It runs
``local[*]`` by default, with no cluster and no server, and runs unchanged on a cluster:

* ``master`` argument, else ``CAIRN_SPARK_MASTER`` (``spark://host:7077``, ``yarn``,
  ``k8s://...``), else ``local[*]``;
* under ``spark-submit`` (``PYSPARK_GATEWAY_PORT`` is set) the master and the JVM come from
  spark-submit and are left alone.

Environment pitfalls handled here, before the JVM starts (they cannot change after):

=====================  ========================================================================
``JAVA_HOME``          kept if it holds ``bin/java``; else found from ``java`` on ``PATH``
                       (symlinks resolved). Spark 4 needs Java 17+: an older or missing Java is
                       a :class:`PipelineEnvironmentError` with the fix in its message.
``PYSPARK_PYTHON``     defaults to ``sys.executable``, so executors run this interpreter (with
                       pyarrow and mqcore), not whatever ``python3`` is on ``PATH``.
``pyarrow``            must import (the Data Source yields Arrow batches); checked up front.
``SPARK_LOCAL_IP``     ``127.0.0.1`` for local masters only (a cluster driver must be reachable).
``PYTHONPATH``         local masters: the directory holding ``pipeline/`` and ``mqcore/`` is put
                       first, so Python workers import this checkout. Cluster masters: both
                       packages are zipped and shipped with ``addPyFile``.
logs                   driver log4j2 at WARN (``log4j2.properties`` beside this file), log
                       level WARN, no console progress bar.
Arrow bounds checks    off in a local driver JVM (``arrow.enable_unsafe_memory_access``), which
                       turns every row the Data Source sends into an UnsafeRow: ~15% less JVM
                       CPU per full-schema row. On a cluster, add that property to
                       ``spark.executor.extraJavaOptions`` yourself.
=====================  ========================================================================

Session settings: UTC session time zone (dates and minutes in the archive and the statistics
are UTC), Python filter push-down on (the Data Source implements ``pushFilters``, and Spark
refuses such a reader while the flag is off), the UI off unless asked for, and locally as many
shuffle partitions as cores instead of 200.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "DEFAULT_MASTER",
    "MIN_JAVA_MAJOR",
    "PipelineEnvironmentError",
    "find_java_home",
    "get_session",
    "resolve_master",
    "stop_session",
]

DEFAULT_MASTER = "local[*]"
MIN_JAVA_MAJOR = 17
_PACKAGE_DIR = Path(__file__).resolve().parent
_SOURCE_ROOT = _PACKAGE_DIR.parent  # holds pipeline/ and mqcore/
_LOG4J2 = _PACKAGE_DIR / "log4j2.properties"
_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?')
# Arrow Java bounds-checks every buffer read (a reference-count read per value); turning that
# off cuts the executor's CPU per full-schema row of the cairn source by ~15% (the JVM reads
# each of a row's ~30 values from Arrow vectors to build its UnsafeRow). The buffers are the
# ones Arrow's own IPC reader builds from our Python workers' batches.
_ARROW_UNCHECKED = "-Darrow.enable_unsafe_memory_access=true"


class PipelineEnvironmentError(RuntimeError):
    """Spark cannot start here: Java, pyarrow or PySpark is missing or too old."""


def resolve_master(master: str | None = None) -> str | None:
    """The master to use: ``master``, ``CAIRN_SPARK_MASTER``, or ``local[*]``.

    Returns:
        None under ``spark-submit`` (it has already chosen the master).
    """
    if master:
        return master
    if os.environ.get("PYSPARK_GATEWAY_PORT"):
        return None
    return os.environ.get("CAIRN_SPARK_MASTER", "").strip() or DEFAULT_MASTER


def _java_major(java: str) -> int:
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except OSError as exc:
        raise PipelineEnvironmentError(f"cannot run {java}: {exc}") from None
    match = _VERSION.search(out.stderr + out.stdout)
    if match is None:
        raise PipelineEnvironmentError(f"cannot tell the Java version from `{java} -version`")
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major  # "1.8.0" is Java 8


def find_java_home() -> str:
    """A ``JAVA_HOME`` with Java 17 or newer: the configured one, else from ``java`` on PATH.

    Raises:
        PipelineEnvironmentError: no Java, or one older than 17.
    """
    configured = os.environ.get("JAVA_HOME", "").strip()
    if configured and (Path(configured) / "bin" / "java").is_file():
        home = Path(configured)
    else:
        found = shutil.which("java")
        if found is None:
            where = f" (JAVA_HOME={configured} has no bin/java)" if configured else ""
            raise PipelineEnvironmentError(
                f"Java {MIN_JAVA_MAJOR}+ is required by Spark and was not found{where}: install "
                f"it (Debian: apt-get install openjdk-{MIN_JAVA_MAJOR}-jre-headless) or set "
                "JAVA_HOME"
            )
        home = Path(found).resolve().parent.parent
    major = _java_major(str(home / "bin" / "java"))
    if major < MIN_JAVA_MAJOR:
        raise PipelineEnvironmentError(
            f"Spark 4 needs Java {MIN_JAVA_MAJOR} or newer; {home} is Java {major}. Install "
            f"openjdk-{MIN_JAVA_MAJOR} and point JAVA_HOME at it"
        )
    return str(home)


def _check_python_packages() -> None:
    try:
        import pyarrow
        import pyspark
    except ImportError as exc:
        raise PipelineEnvironmentError(
            f"the pipeline needs PySpark and pyarrow ({exc}); install the project's `spark` "
            "extra: pip install -e '.[spark]'"
        ) from None
    if int(pyspark.__version__.split(".")[0]) < 4:
        raise PipelineEnvironmentError(f"PySpark 4 is required, found {pyspark.__version__}")
    if int(pyarrow.__version__.split(".")[0]) < 17:
        raise PipelineEnvironmentError(f"pyarrow 17+ is required, found {pyarrow.__version__}")


def _prepare_environment(master: str | None) -> None:
    """Set what the JVM and the Python workers inherit. Idempotent."""
    _check_python_packages()
    if master is None:  # spark-submit owns the JVM
        return
    os.environ["JAVA_HOME"] = find_java_home()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        if str(_SOURCE_ROOT) not in paths:
            os.environ["PYTHONPATH"] = os.pathsep.join([str(_SOURCE_ROOT), *paths])


def _local_cores(master: str | None) -> int:
    match = re.fullmatch(r"local\[(\d+)(?:,\d+)?\]", master or "")
    if match:
        return int(match.group(1))
    return os.cpu_count() or 2


def _code_zip() -> str:
    """``pipeline`` and ``mqcore`` as one zip, for executors that do not have this checkout."""
    fd, path = tempfile.mkstemp(prefix="cairn-pipeline-", suffix=".zip")
    os.close(fd)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for package in ("pipeline", "mqcore"):
            for file in sorted((_SOURCE_ROOT / package).rglob("*")):
                if file.suffix in (".py", ".properties") and "__pycache__" not in file.parts:
                    zf.write(file, file.relative_to(_SOURCE_ROOT).as_posix())
    return path


def get_session(
    master: str | None = None,
    *,
    app_name: str = "cairn-pipeline",
    ui: bool = False,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """The pipeline's SparkSession (created once per process, then reused).

    The ``cairn`` data source is registered on it, so ``spark.read.format("cairn")`` works.

    Args:
        master: overrides ``CAIRN_SPARK_MASTER``; ignored when a session already exists.
        app_name: shown in the cluster's UI.
        ui: start the Spark web UI (off by default: the jobs are batch and tests run in
            parallel).
        conf: extra Spark settings, applied last.

    Raises:
        PipelineEnvironmentError: Java 17+, PySpark 4 or pyarrow 17+ is missing.
    """
    resolved = resolve_master(master)
    _prepare_environment(resolved)
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its INFO lines reach Django's root
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        _register(active)
        return active
    builder = SparkSession.builder.appName(app_name)
    settings: dict[str, str] = {
        "spark.ui.enabled": "true" if ui else "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.python.filterPushdown.enabled": "true",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.python.worker.reuse": "true",
        "spark.sql.debug.maxToStringFields": "100",  # the schema has 21 columns: no WARN
    }
    if resolved is not None:
        builder = builder.master(resolved)
        java_options = []
        if _LOG4J2.is_file():  # package data: absent from a wheel built without it
            java_options.append(f"-Dlog4j2.configurationFile={_LOG4J2.as_uri()}")
        if resolved.startswith("local"):  # the driver JVM is also the executor
            java_options.append(_ARROW_UNCHECKED)
        if java_options:
            settings["spark.driver.extraJavaOptions"] = " ".join(java_options)
        if resolved.startswith("local"):
            cores = _local_cores(resolved)
            settings["spark.sql.shuffle.partitions"] = str(max(2, cores))
            settings["spark.default.parallelism"] = str(max(2, cores))
            settings["spark.driver.host"] = "127.0.0.1"
            settings["spark.driver.bindAddress"] = "127.0.0.1"
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    if resolved is not None and not resolved.startswith("local"):
        spark.sparkContext.addPyFile(_code_zip())
    _register(spark)
    return spark


_registered: set[int] = set()


def _register(spark: SparkSession) -> None:
    """Register the ``cairn`` format once per session (re-registering logs a WARN)."""
    from pipeline.datasource import CairnDataSource

    if id(spark) not in _registered:
        spark.dataSource.register(CairnDataSource)
        _registered.add(id(spark))


def stop_session() -> None:
    """Stop the active session, if any (tests and the command call it on exit)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
