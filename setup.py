"""Builds the optional C accelerators: every src/ferrymq/_native/*.c becomes ferrymq._native.<name>.

They are optional: where no C compiler is at hand the build skips them and the pure-Python code
paths run instead (see ferrymq._native.load).
"""

from pathlib import Path

from setuptools import Extension, setup

native = Path("src/ferrymq/_native")
libraries = {"hmac": ["crypto"]}  # OpenSSL's SHA-1; without its headers that accelerator is skipped
setup(
    ext_modules=[
        Extension(
            f"ferrymq._native.{source.stem}",
            [str(source)],
            libraries=libraries.get(source.stem, []),
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wno-unused-function"],
            optional=True,
        )
        for source in sorted(native.glob("*.c"))
    ]
)
