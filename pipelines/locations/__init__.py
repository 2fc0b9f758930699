"""Code locations for many machines (Kubernetes, Celery)."""
