"""Sphinx configuration for ustack's documentation: ``tools/run docs`` builds it into build/docs/html.

Autodoc reads the docstrings of the installed package (the .venv's editable
install, so ``ustack._fastpath`` is built); pages are Markdown (MyST) or
reStructuredText. Intersphinx to the Python standard library works offline:
it reads the inventory Debian's ``python3-doc`` package installs (tools/run
docs installs it when run as root), or the file named by
``USTACK_PYTHON_INVENTORY`` (``none``: behave as without one), and never
downloads one. Without a local inventory, references to the standard
library stay plain text and are not reported; references to ustack's own
names are always checked (``-n``).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "_ext"))

import ustack  # noqa: E402  (the installed package: docs are built from it)

project = "ustack"
author = "the ustack engineers"
copyright = "2026, the ustack engineers"
release = version = ustack.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.intersphinx",
    "myst_parser",
    "ustack_cli",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "_static/*.dot", "_static/*.json"]
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

html_theme = "alabaster"
html_static_path = ["_static"]
html_title = f"ustack {release}"
html_theme_options = {
    "description": "A user-space TCP/UDP/IP stack for Python over kernel-bypass packet I/O",
    "fixed_sidebar": False,
    "page_width": "1100px",
}

# -- autodoc ---------------------------------------------------------------------------------------
autodoc_default_options = {"members": True, "undoc-members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"  # annotations in the parameter list, not the signature
autodoc_typehints_format = "short"
autodoc_docstring_signature = False  # the stdlib methods ustack reuses (makefile) start with a C-style signature line
autosummary_generate = False
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

nitpicky = True
# 'more than one target' (a return annotation ``type`` meets the sockets' ``type`` attributes) is not an error;
# unresolved references (ref.class, ref.func, ref.exc...) still are.
suppress_warnings = ["ref.python"]
# Names the reference does not document (the protocol layers below the API) are allowed to stay
# unlinked; everything under the documented modules must resolve.
nitpick_ignore_regex = [
    (r"py:.*", r"ustack\.(transport|net|wire|timers|stats|rxhold|snapshot|capture|ratelimit|pcap|_fastpath)(\..*)?"),
    (r"py:.*", r"ustack\.backends\.(?!registry)\w+(\..*)?"),
    (r"py:.*", r"(Connection|TcpConnection|Listener|UdpEndpoint|TcpInfo|TcpConfig|PipeLink|PcapDevice|Lease|Reservation)"),
    (r"py:.*", r"(.*\.)?_\w+"),  # private names (a public class's private base) are not part of the reference
    (r"py:class", r"asyncio\.(unix_events|transports|events|base_events|selector_events)\.\w+"),  # asyncio's own paths
]

# -- intersphinx to the standard library, offline ----------------------------------------------------
def _python_inventory() -> str | None:
    named = os.environ.get("USTACK_PYTHON_INVENTORY")
    if named == "none":
        return None  # as on a machine without python3-doc (how tools/run docs behaves there)
    candidates = [named] if named else []
    major_minor = "%d.%d" % sys.version_info[:2]
    candidates += [
        f"/usr/share/doc/python{major_minor}/html/objects.inv",
        f"/usr/share/doc/python{major_minor}-doc/html/objects.inv",
        "/usr/share/doc/python3/html/objects.inv",
        "/usr/share/doc/python3-doc/html/objects.inv",
    ]
    for path in candidates:
        if path and os.path.isfile(path):
            return path
    return None


PYTHON_INVENTORY = _python_inventory()
if PYTHON_INVENTORY:
    intersphinx_mapping = {"python": ("https://docs.python.org/3", PYTHON_INVENTORY)}
else:
    intersphinx_mapping = {}
    # No local inventory: the standard library's names stay plain text instead of failing -n.
    nitpick_ignore_regex.append((r"py:.*", r"(?!ustack\b).*"))
intersphinx_timeout = 5


# -- every public name documented -------------------------------------------------------------------
def _require_docstring(app, what, name, obj, options, lines):
    """A public function, class, method or property without a docstring is a warning (an error under -W)."""
    module = getattr(obj, "__module__", None)
    if module and not name.startswith(module + "."):
        return  # a name imported from elsewhere (autodoc leaves it out of the page)
    if what in ("function", "class", "method", "property") and not any(line.strip() for line in lines):
        from sphinx.util import logging

        logging.getLogger("ustack.docs").warning(f"{name} has no docstring (say what it takes, returns and raises)",
                                                  type="ustack", subtype="docstring")


def setup(app):
    app.connect("autodoc-process-docstring", _require_docstring)
