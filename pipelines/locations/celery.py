"""The code location for Celery workers on several machines (`deploy/celery/`): Sheaf's
definitions whose runs send each step to a Celery queue, taken by `dagster-celery worker start`
on any machine that has the project installed and the same instance (deploy/celery/dagster.yaml).
The broker and the result backend come from the environment (`CELERY_BROKER_URL`,
`CELERY_RESULT_BACKEND`, e.g. ``redis://:password@redis.lab:6379/0``): no secret in a file.
Needs `pip install sheaf[cluster]`.

    dagster code-server start -h 0.0.0.0 -p 4000 -m pipelines.locations.celery
"""
from dagster_celery import celery_executor

from pipelines.definitions import build_definitions

#: The executor's config, the same as `deploy/celery/worker.yaml` gives the workers (a test checks it).
#: A step is long (a whole range of papers): a worker takes one at a time, and a worker that dies
#: gives its step back to the queue. A broker that restarts mid-run is waited for (~1 min): the run
#: reading its steps' results and sending the next ones retries instead of failing.
CELERY_CONFIG = {"broker": {"env": "CELERY_BROKER_URL"}, "backend": {"env": "CELERY_RESULT_BACKEND"},
                 "config_source": {"worker_prefetch_multiplier": 1, "task_acks_late": True,
                                   "result_backend_always_retry": True, "result_backend_max_retries": 30,
                                   "task_publish_retry_policy": {"max_retries": 30, "interval_start": 0,
                                                                 "interval_step": 1, "interval_max": 3}}}

defs = build_definitions(executor=celery_executor.configured(CELERY_CONFIG, name="sheaf_celery_executor"))
