"""Deployment files (configs for Dagster, Celery, Kubernetes, the Dockerfile) and
`local_cluster`, which runs the Celery deployment on one machine; its helpers for driving a
running cluster are imported by its test and its benchmark."""
