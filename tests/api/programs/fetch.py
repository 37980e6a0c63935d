"""A plain urllib client: fetch a URL, print its length and SHA-256."""

import hashlib
import sys
import urllib.request

with urllib.request.urlopen(sys.argv[1], timeout=10) as r:
    body = r.read()
print(len(body), hashlib.sha256(body).hexdigest())
