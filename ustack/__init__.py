"""ustack: a user-space TCP/UDP/IPv4 stack for Python over kernel-bypass packet I/O."""

__version__ = "0.1.0"
