"""IP protocol numbers (IANA; the IPv4 Protocol field and the IPv6 Next Header field share them)."""

PROTO_ICMP = 1
PROTO_TCP = 6
PROTO_UDP = 17
PROTO_ICMPV6 = 58
