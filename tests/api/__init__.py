"""Tests of ustack.api: stdlib-complete sockets and per-socket readiness fds."""
