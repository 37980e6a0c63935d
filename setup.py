"""Build glue: compiles ustack/_fastpath.pyx (metadata lives in pyproject.toml)."""
from Cython.Build import cythonize
from setuptools import Extension, setup

extensions = [
    Extension(
        "ustack._fastpath",
        ["ustack/_fastpath.pyx"],
        extra_compile_args=["-O2"],
    )
]

setup(
    ext_modules=cythonize(
        extensions,
        compiler_directives={
            "language_level": 3,
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": False,
        },
    )
)
