"""Progress control as a standalone process, deployed as a Kubernetes sidecar."""
