"""Security of the Kafka listener (issue 22): Kafka's ACL model and SASL, pure."""
