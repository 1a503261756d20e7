"""Python side of kvstash: reference implementations and tooling (see tools/README.md)."""
