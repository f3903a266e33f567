"""Worker entry points per role, the ``tandem`` CLI and the embedded runtime."""

if __name__ != "tandem.workers":  # this folder imported under its bare name, from the repository root
    raise ImportError(
        f"{__name__!r} is tandem's folder workers/, installed as the package 'tandem.workers': "
        "import tandem.workers instead (a bare import would load a second copy, whose classes and "
        "errors are not tandem's)"
    )
