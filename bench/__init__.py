"""Benchmarks behind `make bench`: a raw-protocol Kafka load generator with its own minimal codec,
run against groupcoord and, for comparison, the tansu broker. See bench/__main__.py."""
