"""The pure core, on a fake clock (tests.support.fakeclock)."""
