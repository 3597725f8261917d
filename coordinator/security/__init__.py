"""Security (issue 22): Kafka's ACL model and SASL for the listener, pure; and the settings of
groupcoord's own clients toward a secured cluster (client.py)."""
