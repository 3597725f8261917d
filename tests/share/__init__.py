"""Share groups (KIP-932) with the real share consumers: Kafka's own behaviour, and the same steps
through groupcoord's sidecar."""
