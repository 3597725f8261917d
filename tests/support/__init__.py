"""What the tests share: the fake-clock harness, real brokers and client drivers, the sidecar stack,
raw-protocol connections, the peers installer."""
