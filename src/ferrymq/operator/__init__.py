"""Kubernetes operator (extra [operator])."""
