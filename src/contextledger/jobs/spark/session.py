"""Which Spark to run on, by the conventions Spark users already follow.

Under ``spark-submit`` (or ``pyspark``) the master and every setting come from the
command line, so nothing is overridden; a Spark Connect URL in ``$SPARK_REMOTE`` is
left to pyspark; otherwise the master is ``$SPARK_MASTER``, else ``local[*]``. A local
master runs its Python workers with this interpreter (``$PYSPARK_PYTHON`` unless set),
which has contextledger: the what-if replays on the executors. On a cluster, install
contextledger where the executors run.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The master when nothing else names one: every core of this machine.
DEFAULT_MASTER = "local[*]"


def master_from_environment(environ: dict[str, str] | None = None) -> str | None:
    """The master to set, or None when ``spark-submit``/``pyspark`` (a gateway it opened)
    or ``$SPARK_REMOTE`` (Spark Connect) already decides it.

    >>> master_from_environment({})
    'local[*]'
    >>> master_from_environment({"SPARK_MASTER": "spark://head:7077"})
    'spark://head:7077'
    >>> master_from_environment({"PYSPARK_GATEWAY_PORT": "4041"}) is None
    True
    """
    environ = dict(os.environ) if environ is None else environ
    if "PYSPARK_GATEWAY_PORT" in environ or "SPARK_REMOTE" in environ:
        return None
    return environ.get("SPARK_MASTER") or DEFAULT_MASTER


def get_session(master: str | None = None, app_name: str = "contextledger") -> SparkSession:
    """The active session if there is one, else a new one: ``master`` if given, else as
    :func:`master_from_environment` says."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and master is None:
        return active
    builder = SparkSession.builder.appName(app_name)
    chosen = master or master_from_environment()
    if chosen is not None:
        builder = builder.master(chosen)
        if chosen.startswith("local"):  # pyspark reads only the environment for this
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return builder.getOrCreate()
