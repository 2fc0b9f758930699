"""The code location for a Kubernetes cluster (`deploy/k8s/`): Sheaf's definitions whose runs
execute each step in its own pod (`k8s_job_executor`). The executor takes its image, namespace,
secrets and config maps from the instance's `K8sRunLauncher` (deploy/k8s/dagster.yaml); a run
launched from the UI may add `deploy/k8s/run_config.yaml`. Needs `pip install sheaf[cluster]`.

    dagster code-server start -h 0.0.0.0 -p 4000 -m pipelines.locations.k8s
"""
from dagster_k8s import k8s_job_executor

from pipelines.definitions import build_definitions

defs = build_definitions(executor=k8s_job_executor)
