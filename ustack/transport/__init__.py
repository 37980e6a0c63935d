"""Transports: UDP (``udp``) and TCP (``tcp/``), above the network layer (``ustack.net``)."""
